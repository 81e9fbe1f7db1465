"""The engine is an object: the reference and the compiled engine behind one interface
(engine/engines.py), chosen once (engine/select.py). No caller outside the engine package asks
which engine it holds, and the two give the same numbers through the same calls."""

import ast
from pathlib import Path

import numpy as np
import pytest

import flatformer
from flatformer.config import preset
from flatformer.tasks.windows import TaskData
from flatformer.engine import kernels
from flatformer.engine.engines import COMPILED, REFERENCE, Compiled, Engine, Reference
from flatformer.engine.optim import AdamW
from flatformer.engine.select import choose, resolve
from flatformer.training.recipes import get_recipe
from flatformer.tasks import get_task
from flatformer.training.trainer import CHUNK, batch_indices

PACKAGE = Path(flatformer.__file__).parent
ROOT = PACKAGE.parent
ENGINE_NAMES = {"COMPILED", "NUMPY", "REFERENCE", "Compiled", "Reference"}
KERNEL_CALLS = {"train_steps", "evaluate", "logits_at", "loss_and_gradients"}


def asks_which_engine(source: str) -> list[str]:
    """Where `source` asks which engine it holds: reads a `compiled` flag, compares an engine's
    name or an engine object, tests isinstance against an engine class, or calls the compiled
    kernels (kernels.train_steps, ...) itself rather than an Engine's method."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr == "compiled":
            found.append(f"line {line}: .compiled")
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Name) and side.id in ENGINE_NAMES:
                    found.append(f"line {line}: compared with {side.id}")
                if (
                    isinstance(side, ast.Attribute)
                    and side.attr == "name"
                    and "engine" in ast.unparse(side.value).lower()
                ):
                    found.append(f"line {line}: compares {ast.unparse(side)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
            if any(n.id in ENGINE_NAMES for n in ast.walk(node) if isinstance(n, ast.Name)):
                found.append(f"line {line}: isinstance against an engine class")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in KERNEL_CALLS
            and ast.unparse(node.value).endswith("kernels")
        ):
            found.append(f"line {line}: calls kernels.{node.attr} itself")
    return found


def callers() -> list[Path]:
    """Every module outside the engine package, and the benchmarks."""
    inside = PACKAGE / "engine"
    return [p for p in PACKAGE.rglob("*.py") if inside not in p.parents] + sorted(
        (ROOT / "bench").glob("*.py")
    )


def test_the_check_finds_each_way_of_asking():
    snippets = [
        "if engine.compiled:\n    pass",
        "x = job.engine.name == 'numba'",
        "if isinstance(job.engine, Compiled):\n    pass",
        "if self.job.engine is COMPILED:\n    pass",
        "kernels.train_steps(params, opt, corpus, starts, False, lrs, loss)",
    ]
    for snippet in snippets:
        assert asks_which_engine(snippet), snippet
    assert not asks_which_engine("job.engine.train_steps(p, o, c, s, False, lrs, loss)")


def test_no_caller_outside_the_engine_asks_which_engine_it_holds():
    files = callers()
    assert PACKAGE / "training" / "trainer.py" in files
    assert PACKAGE / "training" / "evaluate.py" in files
    assert ROOT / "bench" / "train_speed.py" in files
    found = {
        str(p.relative_to(ROOT)): hits
        for p in files
        if (hits := asks_which_engine(p.read_text(encoding="utf-8")))
    }
    assert not found, found


def test_both_engines_are_one_interface_chosen_once(tmp_path):
    interface = {"cold", "prepare", "warm", "train_steps", "evaluate", "logits_at"}
    for cls in (Reference, Compiled):
        assert issubclass(cls, Engine)
        assert interface <= {n for n in dir(cls) if not n.startswith("_")}
    assert {REFERENCE.name, COMPILED.name} == {"numpy", "numba"}
    cfg = preset("paper-2d", 12)
    recipe, engine = resolve(cfg, get_recipe("paper"))
    assert recipe.dtype == "float64" and engine is choose(cfg, recipe) is COMPILED
    assert choose(cfg, recipe, "numpy") is REFERENCE


def steps_on(engine, cfg, data, n):
    """n steps of two seeds on `engine`, from the same initialisation and batches."""
    from flatformer.engine.model import init_params

    params = init_params(cfg, [np.random.default_rng(s) for s in (3, 4)])
    opt, loss = AdamW(params.flat), np.zeros(2)
    idx = np.stack([batch_indices(s, 0, 0, len(data.train_starts), 8) for s in (3, 4)], 1)
    starts = data.train_starts[idx[:n]]
    assert n <= CHUNK
    lrs = [1e-2 * (1 + k % 3) for k in range(n)]
    bad = engine.train_steps(params, opt, data.train, starts, False, lrs, loss)
    assert (bad == -1).all() and opt.t == n
    return params, loss


@pytest.mark.skipif(kernels.numba is None, reason="the compiled engine needs numba")
@pytest.mark.parametrize("name", ["paper-2d", "simulator-16d"])
def test_the_engines_give_the_same_numbers_through_the_same_calls(name):
    task = get_task("plus-last-even")
    cfg = preset(name, len(task.vocab))
    data = TaskData.build(task, cfg.n_ctx)
    (p_ref, loss_ref), (p_fast, loss_fast) = (
        steps_on(e, cfg, data, 30) for e in (REFERENCE, COMPILED)
    )
    np.testing.assert_allclose(p_fast.flat, p_ref.flat, atol=1e-10, rtol=0)
    np.testing.assert_allclose(loss_fast, loss_ref, rtol=1e-12, atol=0)
    assert not np.array_equal(p_ref.flat, steps_on(REFERENCE, cfg, data, 29)[0].flat)
    held = [e.evaluate(p_ref, data) for e in (REFERENCE, COMPILED)]
    np.testing.assert_allclose(held[1][0], held[0][0], rtol=1e-12, atol=0)
    assert held[1][1].tobytes() == held[0][1].tobytes()
    at = np.arange(len(data.rule_inputs)) % cfg.n_ctx
    for index in (None, at):
        logits = [e.logits_at(p_ref, data.rule_inputs, index) for e in (REFERENCE, COMPILED)]
        np.testing.assert_allclose(logits[1], logits[0], atol=1e-12, rtol=0)


def test_a_diverged_step_is_reported_at_the_same_index_by_both_engines():
    task = get_task("plus-last-even")
    cfg = preset("paper-2d", len(task.vocab))
    data = TaskData.build(task, cfg.n_ctx)
    from flatformer.engine.model import init_params

    seen = []
    for engine in (REFERENCE, COMPILED):
        params = init_params(cfg, [np.random.default_rng(s) for s in (0, 1)])
        opt, loss = AdamW(params.flat), np.zeros(2)
        starts = data.train_starts[np.zeros((5, 2, 8), int)]
        # a learning rate that overflows the weights at the fourth step
        lrs = [1e-3, 1e-3, 1e-3, 1e308, 1e-3]
        with np.errstate(all="ignore"):  # the overflow is the point
            seen.append(engine.train_steps(params, opt, data.train, starts, False, lrs, loss))
    assert (seen[0] >= 0).any() and (seen[1] >= 0).any()
    assert int(seen[0][seen[0] >= 0].min()) == int(seen[1][seen[1] >= 0].min())
