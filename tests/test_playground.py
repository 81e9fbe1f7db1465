"""The playground's JavaScript engine against the NumPy engine: gradients on the same weights
and batch, AdamW after many steps on the same batches, held-out windows and rule error of the
same sequences (node's test runner on fixtures written here), and the tasks' JavaScript
generators checked against the Python rules."""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from flatformer.config import preset
from flatformer.tasks.windows import TaskData
from flatformer.training.evaluate import evaluate
from flatformer.explorer.page import CONSTANTS
from flatformer.engine.model import Params, backward, cross_entropy, forward, init_params
from flatformer.engine.dtypes import default_dtype
from flatformer.engine.optim import AdamW
from flatformer.tasks import get_task
from flatformer.training.trainer import get_recipe

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
TASKS = ["plus-last-even", "last-odd", "successor", "max-so-far", "copy-3-back", "induction"]
# Every block kind: plain 2-D, two layers, W_O with two heads, pre-LN GELU, attention-only, and
# Q/K/V biases with ln_final.
CONFIGS = {
    "paper-2d": {},
    "paper-2d-2layer": {},
    "small-4d-2head": {},
    "simulator-16d": {},
    "attn-only-2l": {"n_ctx": 8},
    "simulator-16d+bias+ln_final": {"qkv_bias": True, "ln_final": True, "unembed_bias": True},
}

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@cache
def data_of(name, n_ctx):
    return TaskData.build(get_task(name), n_ctx)


def batch_of(task, cfg, rng, size=4, drop=True):
    data = data_of(task.name, cfg.n_ctx)
    starts = data.train_starts[rng.integers(len(data.train_starts), size=size)]
    inputs, targets, weights = data.train.windows(starts, cfg.n_ctx, drop)
    return inputs, targets, weights


def as_batch(inputs, targets, weights):
    return {"inputs": inputs.tolist(), "targets": targets.tolist(), "weights": weights.tolist()}


def grads_of(cfg, flat, inputs, targets, weights):
    params = Params(cfg, 1, flat.copy())
    logits, cache = forward(params, inputs[None])
    loss, dlogits = cross_entropy(logits, targets[None], weights[None])
    return float(loss[0]), backward(params, cache, dlogits).flat


def fixture() -> dict:
    rng = np.random.default_rng(0)
    task = get_task("plus-last-even")
    gradients = []
    for name, extra in CONFIGS.items():
        cfg = preset(name.split("+")[0], len(task.vocab), **extra)
        params = init_params(cfg, [np.random.default_rng(1)])
        params.flat[:] += 0.3 * rng.standard_normal(params.flat.size)  # off the init's symmetry
        batch = batch_of(task, cfg, rng)
        loss, grad = grads_of(cfg, params.flat, *batch)
        gradients.append(
            {
                "name": name,
                "cfg": cfg.to_dict(),
                "params": params.flat.tolist(),
                "batch": as_batch(*batch),
                "loss": loss,
                "grad": grad.tolist(),
            }
        )
    cfg = preset("paper-2d", len(task.vocab))
    recipe = get_recipe("default", steps=200)
    params = init_params(cfg, [np.random.default_rng(2)], 0.3)
    start = params.flat.copy()
    opt = AdamW(params.flat, recipe.betas, recipe.eps, recipe.weight_decay)
    batches, losses = [], []
    for step in range(recipe.steps):
        batch = batch_of(task, cfg, rng, size=8)
        batches.append(as_batch(*batch))
        loss, grad = grads_of(cfg, params.flat, *batch)
        losses.append(loss)
        opt.step(grad, recipe.lr_at(step))
    adam = {
        "cfg": cfg.to_dict(),
        "params": start.tolist(),
        "batches": batches,
        "betas": list(recipe.betas),
        "eps": recipe.eps,
        "weight_decay": recipe.weight_decay,
        "recipe": recipe.to_dict(),
        "final": params.flat.tolist(),
        "v": opt.v.tolist(),
        "losses": losses,
    }
    held = []
    for name in TASKS:
        t = get_task(name)
        cfg = preset(t.default_preset, len(t.vocab))
        train, seqs = t.split(0)
        seqs = seqs[:12]  # a few sequences keep node's evaluation quick
        t.split = lambda seed, train=train, seqs=seqs: (train[:5], seqs)
        data = TaskData.build(t, cfg.n_ctx)
        p = init_params(cfg, [np.random.default_rng(3)])
        loss, rule_error = evaluate(p, data)
        held.append(
            {
                "task": name,
                "cfg": cfg.to_dict(),
                "seqs": [s.tolist() for s in seqs],
                "rules": [[a.tolist() for a in t.rule(s)] for s in seqs],
                "val_inputs": data.val_inputs.tolist(),
                "rule_inputs": data.rule_inputs.tolist(),
                "rule_index": data.rule_index.tolist(),
                "params": p.flat.tolist(),
                "loss": float(loss[0]),
                "rule_error": float(rule_error[0]),
            }
        )
    return {"gradients": gradients, "adam": adam, "held": held, "constants": CONSTANTS}


def test_javascript_engine_equals_numpy(tmp_path):
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(fixture()))
    result = subprocess.run(
        [NODE, "--test", str(ROOT / "tests/js/playground.test.js")],
        env={"PLAYGROUND_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass " in result.stdout


@pytest.mark.parametrize("name", TASKS)
def test_javascript_generators_follow_the_python_rule(name):
    """Sequences from the JS generator: lengths in the task's range, every token in the
    vocabulary, every position the Python rule forces holding its target, and the free
    positions not all alike (the generator draws them)."""
    script = (
        f"const K = require('{ROOT}/flatformer/explorer/tasks.js');"
        f"const T = require('{ROOT}/flatformer/explorer/train.js');"
        f"const u = T.rng(5); const t = K.TASKS['{name}'];"
        f"console.log(JSON.stringify(Array.from({{length: 300}}, () => t.sample(u))));"
    )
    seqs = json.loads(
        subprocess.run([NODE, "-e", script], capture_output=True, text=True, check=True).stdout
    )
    task = get_task(name)
    forced = 0
    for seq in seqs:
        assert task.min_len <= len(seq) <= task.max_len
        assert all(0 <= t < len(task.vocab) for t in seq)
        target, _ = task.rule(np.array(seq))
        hit = target >= 0
        forced += hit.sum()
        assert (np.array(seq)[hit] == target[hit]).all()
    assert forced > 100
    assert len({tuple(s[:5]) for s in seqs}) > 100


def test_playground_command_writes_one_offline_page(tmp_path):
    from clitools import cli

    target = tmp_path / "pg.html"
    done = cli("playground", "--out", target)
    assert done.returncode == 0, done.stderr
    text = target.read_text()
    assert "worker-src blob:" in text and "default-src 'none'" in text
    assert "http://" not in text.split("<script>")[0] and "https://" not in text
    refused = cli("playground", "--out", tmp_path / "missing" / "pg.html")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr


@pytest.mark.parametrize(
    "name,steps",
    [("plus-last-even", 20000), ("plus-last-even", 1500), ("successor", 100), ("induction", 3000)],
)
def test_javascript_recipe_equals_get_recipe(name, steps):
    """The page's recipe is train.get_recipe's: the default, the task's defaults, the steps
    (with the selection step moved for short runs); and Recipe accepts it as it is."""
    from flatformer.training.trainer import Recipe

    from flatformer.explorer.page import CONSTANTS

    script = (
        f"globalThis.FlatConstants = {json.dumps(CONSTANTS)};"  # as page.py ships them
        f"const S = require('{ROOT}/flatformer/explorer/session.js');"
        f"const K = require('{ROOT}/flatformer/explorer/tasks.js');"
        f"console.log(JSON.stringify(S.recipe(K.TASKS['{name}'], {{steps: {steps}}})));"
    )
    js = json.loads(
        subprocess.run([NODE, "-e", script], capture_output=True, text=True, check=True).stdout
    )
    task = get_task(name)
    python = get_recipe("default", **{**task.defaults, "steps": steps}).to_dict()
    # The page trains in float64, what a Job resolves the recipe's "auto" to for its models.
    cfg = preset(task.default_preset, len(task.vocab))
    assert python["dtype"] == "auto" and default_dtype(cfg) == "float64"
    python["dtype"] = "float64"
    assert js == python
    assert Recipe.from_dict(js).to_dict() == python
