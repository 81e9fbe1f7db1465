"""The compiled fast path (kernels.py) against the NumPy reference engine (model.py)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from flatformer.engine import kernels
from flatformer.engine.kernels import beside, drivers
from flatformer.engine.kernels.entries import Text
from flatformer.engine.select import COMPILED, NUMPY, choose
from flatformer.config import preset
from flatformer.tasks.windows import Corpus, TaskData
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate
from flatformer.engine.model import Params, backward, cross_entropy, forward
from flatformer.tasks import get_task
from flatformer.training.jobs import Job
from flatformer.training.recipes import get_recipe
from flatformer.training.trainer import Trainer

from conftest import CONFIGS
from test_model import random_batch

TASK = get_task("plus-last-even")


@pytest.fixture(params=[name for name, c in CONFIGS.items() if kernels.supports(c)])
def cfg(request):
    """The shared configs the compiled path computes (the others are refused, tested below)."""
    return CONFIGS[request.param]


def test_the_presets_train_compiled():
    for name in ("paper-2d", "paper-2d-2layer", "simulator-16d", "small-4d-2head", "attn-only-2l"):
        assert kernels.supports(preset(name, 12)), name
        assert Job(TASK, preset(name, 12), get_recipe("paper"), [0], [None]).engine is COMPILED


def reference_and_fast(params, tokens, targets, weights):
    """The reference engine's gradients and the compiled path's, their losses held equal."""
    logits, cache = forward(params, tokens)
    loss, dlogits = cross_entropy(logits, targets, weights)
    fast_loss, fast = kernels.loss_and_gradients(params, tokens, targets, weights)
    np.testing.assert_allclose(fast_loss, loss, rtol=1e-12, atol=0)
    return backward(params, cache, dlogits), fast


def test_gradients_equal_the_reference_engine(cfg):
    params, tokens, targets, weights = random_batch(cfg, S=3, B=5)
    grads, fast = reference_and_fast(params, tokens, targets, weights)
    scale = np.abs(grads.flat).max()  # relative to the largest gradient (some are exactly 0)
    for name in cfg.param_shapes():
        np.testing.assert_allclose(
            fast[name], grads[name], atol=1e-12 * scale, rtol=0, err_msg=name
        )


def test_logits_equal_the_reference_engine(cfg):
    params, tokens, _, _ = random_batch(cfg, S=2, B=70)  # more windows than one pass holds
    windows = tokens[0]
    logits, _ = forward(params, np.broadcast_to(windows, (2, *windows.shape)))
    np.testing.assert_allclose(kernels.logits_at(params, windows), logits, atol=1e-12, rtol=0)
    index = np.arange(len(windows)) % cfg.n_ctx
    np.testing.assert_allclose(
        kernels.logits_at(params, windows, index),
        logits[:, np.arange(len(windows)), index],
        atol=1e-12,
        rtol=0,
    )


def trained(engine, seeds=(7, 8, 9), steps=300, monkeypatch=None, threads=None):
    cfg = preset("paper-2d", 12)
    data = TaskData.build(TASK, cfg.n_ctx)
    job = Job(
        TASK,
        cfg,
        get_recipe("default", steps=steps, candidates=1),
        list(seeds),
        [None] * len(seeds),
        engine=engine,
    )
    asked = []
    if threads is not None:  # where over_seeds reads it
        monkeypatch.setattr(kernels.drivers, "threads", lambda: asked.append(1) or threads)
    trainer = Trainer(job, data)
    trainer.advance(steps)
    assert bool(asked) == (threads is not None)
    return trainer, data


def test_adamw_steps_equal_the_numpy_trainer():
    fast, data = trained("numba")
    slow, _ = trained("numpy")
    assert fast.opt.t == slow.opt.t == 300
    for buf in ("m", "v"):
        np.testing.assert_allclose(
            getattr(fast.opt, buf), getattr(slow.opt, buf), rtol=1e-7, atol=1e-12, err_msg=buf
        )
    np.testing.assert_allclose(fast.params.flat, slow.params.flat, atol=1e-10, rtol=0)
    np.testing.assert_allclose(fast._loss_sum, slow._loss_sum, rtol=1e-12, atol=0)
    for a, b in zip(evaluate(fast.params, data), evaluate(slow.params, data)):
        np.testing.assert_allclose(a, b, atol=1e-10)


def test_training_passes_the_types_a_second_process_compiles_ahead():
    """drivers.compile_beside compiles train_chunk for train_types in another process: training
    must call it with exactly those types, or the cold start compiles it twice (here, again)."""
    trained("numba")
    assert kernels.train_chunk.signatures == [beside.train_types()]


def test_training_compiles_itself_when_the_second_process_fails(monkeypatch):
    monkeypatch.setattr(drivers, "BOOT", "raise SystemExit(3)")
    monkeypatch.setattr(drivers, "threads", lambda: 2)
    with monkeypatch.context() as m:  # as on a cold start: training's kernel not compiled yet
        m.setattr(drivers, "train_chunk", SimpleNamespace(signatures=[]))
        drivers.compile_beside()
    (process,) = drivers._beside.values()
    fast, _ = trained("numba")  # waits for the failed process, then trains as ever
    assert process.returncode == 3 and not drivers._beside
    assert fast.opt.t == 300


def test_a_seeds_numbers_do_not_depend_on_threads_or_neighbours(monkeypatch):
    runs = [
        trained("numba", seeds, 150, monkeypatch, threads)[0]
        for seeds, threads in (((7, 8, 9), 1), ((7, 8, 9), 2), ((7, 8, 9), 3), ((8,), 2))
    ]
    flats = [r.params.flat for r in runs]
    assert flats[0].tobytes() == flats[1].tobytes() == flats[2].tobytes()
    alone = runs[3].params.seed(0)
    for name, tensor in runs[0].params.seed(1).items():  # seed 8 beside 7 and 9, and alone
        assert tensor.tobytes() == alone[name].tobytes(), name


def test_forcing_the_compiled_engine_on_an_uncovered_model_is_refused(monkeypatch):
    monkeypatch.setattr(kernels, "supports", lambda cfg: False)
    monkeypatch.setattr(kernels.tensors, "supports", lambda cfg: False)
    cfg = preset("paper-2d", 12)
    assert Job(TASK, cfg, get_recipe("paper"), [0], [None]).engine is NUMPY
    with pytest.raises(FlatformerError, match="engine numpy"):
        Job(TASK, cfg, get_recipe("paper"), [0], [None], engine="numba")
    with pytest.raises(FlatformerError, match="engine must be"):
        Job(TASK, cfg, get_recipe("paper"), [0], [None], engine="jax")


@pytest.mark.parametrize("name", ["paper-2d", "simulator-16d"])
def test_float32_stays_within_its_tolerance(name):
    """float32 is held to 1e-5 of the largest gradient on one step (measured: 2e-7) and to
    1e-4 absolute on every weight after 200 AdamW steps (measured: 1.5e-6)."""
    cfg = preset(name, 12)
    params, tokens, targets, weights = random_batch(cfg)
    grads = []
    for p in (params, params.like(params.flat.astype(np.float32))):
        logits, cache = forward(p, tokens)
        grads.append(
            backward(p, cache, cross_entropy(logits, targets, weights.astype(p.flat.dtype))[1]).flat
        )
    assert grads[1].dtype == np.float32
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-5 * np.abs(grads[0]).max(), rtol=0)
    data = TaskData.build(TASK, cfg.n_ctx)
    runs = []
    for dtype in ("float64", "float32"):
        job = Job(
            TASK,
            cfg,
            get_recipe("default", steps=200, candidates=1, dtype=dtype),
            [0, 1],
            [None, None],
        )
        assert job.engine.name == ("numba" if dtype == "float64" else "numpy")
        runs.append(Trainer(job, data))
        runs[-1].advance(200)
    assert runs[1].params.flat.dtype == np.float32
    np.testing.assert_allclose(runs[1].params.flat, runs[0].params.flat, atol=1e-4, rtol=0)
    weights, optim = runs[1].state(0)
    assert all(w.dtype == np.float64 for w in [*weights.values(), optim["m"]])


def test_evaluation_equals_the_reference_engine(cfg, monkeypatch):
    """The held-out loss and rule error computed inside the kernel (the rule windows' last
    block and unembedding at the predicted position only) against evaluate's NumPy path."""
    params, tokens, targets, weights = random_batch(cfg, S=3, B=70)
    rng = np.random.default_rng(1)
    data = SimpleNamespace(
        val_inputs=tokens[0],
        val_targets=targets[0],
        val_weights=weights[0],
        rule_inputs=tokens[1, :67],
        rule_targets=targets[1, :67, 0],
        rule_index=rng.integers(0, cfg.n_ctx, 67),
        rule_allowed=rng.random((67, cfg.d_vocab)) < 0.3,
    )
    fast, no_loss = evaluate(params, data), evaluate(params, data, with_loss=False)
    slow = evaluate(params, data, engine=NUMPY)
    np.testing.assert_allclose(fast[0], slow[0], rtol=1e-12, atol=0)
    assert 0 < slow[1].min() and fast[1].tobytes() == slow[1].tobytes()
    assert np.isnan(no_loss[0]).all() and no_loss[1].tobytes() == fast[1].tobytes()


@pytest.mark.parametrize("drop_unseen", [False, True])
def test_windows_built_in_the_kernel_equal_the_corpus_windows(drop_unseen):
    """The training kernel builds each step's windows itself: data.Corpus.windows's inputs,
    targets and loss weights, with a counted mask and targets whose source lies before."""
    rng = np.random.default_rng(0)
    n, T, B = 300, 8, 40
    target = np.where(rng.random(n) < 0.4, rng.integers(0, 12, n), -1)
    corpus = Corpus(
        rng.integers(0, 12, n),
        target,
        np.where(target >= 0, np.arange(n) - rng.integers(1, 12, n), -1),
        np.array([0]),
        np.array([n]),
        counted=rng.random(n) < 0.7,
    )
    starts = rng.integers(0, n - T - 1, B)
    want = corpus.windows(starts, T, drop_unseen)
    got = np.empty((B, T), np.int64), np.empty((B, T), np.int64), np.empty((B, T))
    text = Text(corpus.tokens, corpus.target, corpus.source, corpus.counted, drop_unseen)
    kernels.windows(text, starts, *got)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert 0 < want[2].sum() < want[2].size


def test_the_vector_lanes_exp_is_within_one_unit_in_the_last_place_of_the_c_librarys():
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.random(20_000) * 708, -rng.random(20_000), [0.0, -708.0, -5e-324]])
    got = np.array([kernels.exp(v) for v in x])
    want = np.array([math.exp(v) for v in x])
    assert np.all(np.abs(got - want) <= np.spacing(want))
    assert kernels.exp(-708.5) == kernels.exp(-np.inf) == 0.0 and np.isnan(kernels.exp(np.nan))


@pytest.mark.parametrize(
    "overrides",
    [
        dict(d_model=5, n_heads=3, d_head=3, d_mlp=7, qkv_bias=True),
        dict(d_model=3, n_heads=1, d_head=1, d_mlp=1),
        dict(d_model=2, n_heads=1, d_head=2, d_mlp=3, act_fn="relu"),
    ],
)
def test_odd_sizes_take_the_same_paths(overrides):
    """The products take two inputs or outputs a pass: an odd one (and a single one, d_head
    and d_mlp 1) has its own pass, checked here against the reference; so has the ReLU MLP at
    d_model 2 (here behind a LayerNorm, which the paper's model lacks)."""
    cfg = preset("simulator-16d", 12, unembed_bias=True, **overrides)
    params, tokens, targets, weights = random_batch(cfg, S=2, B=5)
    grads, fast = reference_and_fast(params, tokens, targets, weights)
    np.testing.assert_allclose(fast.flat, grads.flat, atol=1e-12 * np.abs(grads.flat).max(), rtol=0)
    index = np.arange(5) % cfg.n_ctx
    at = kernels.logits_at(params, tokens[0], index)
    full, _ = forward(params, np.broadcast_to(tokens[0], (2, *tokens[0].shape)))
    np.testing.assert_allclose(at, full[:, np.arange(5), index], atol=1e-12, rtol=0)


def test_imported_model_features_never_reach_the_compiled_path():
    """b_O and the exact GELU are NumPy's alone: the engine chooser says so."""
    cfg = CONFIGS["imported-features"]
    for one in (dict(attn_out_bias=True), dict(act_fn="gelu_erf")):
        variant = CONFIGS["simulator-16d"].replace(**one)
        assert not kernels.supports(variant) and not kernels.preferred(variant, "float64")
    assert not kernels.supports(cfg)
    params, tokens, targets, weights = random_batch(cfg, S=1, B=2)
    with pytest.raises(FlatformerError, match="compiled path does not"):
        kernels.loss_and_gradients(params, tokens, targets, weights)


# Models that attend both ways (compiled RASP programs'), one with fewer output classes than
# tokens: the kernels compute them, held to the reference as the causal ones are.
BOTH_WAYS = {
    "paper-2d": CONFIGS["paper-2d"].replace(causal=False),
    "2-layer-ln-bias": CONFIGS["2-layer-ln-bias"].replace(causal=False, d_vocab_out=7),
    "attn-only-ln-final": CONFIGS["attn-only-ln-final"].replace(causal=False, n_ctx=9),
}


@pytest.mark.parametrize("name", list(BOTH_WAYS))
def test_attention_both_ways_equals_the_reference_engine(name):
    """Gradients (the backward pass), the logits at every position and at one position a
    window (forward_at), against the reference's; the causal mask would change them."""
    cfg = BOTH_WAYS[name]
    assert kernels.supports(cfg) and choose(cfg, None, "numba") == COMPILED
    params, tokens, targets, weights = random_batch(cfg, S=2, B=5)
    grads, fast = reference_and_fast(params, tokens, targets, weights)
    scale = np.abs(grads.flat).max()
    for key in cfg.param_shapes():
        np.testing.assert_allclose(fast[key], grads[key], atol=1e-12 * scale, rtol=0, err_msg=key)
    windows = random_batch(cfg, S=2, B=70)[1][0]  # more windows than one pass holds
    logits, _ = forward(params, np.broadcast_to(windows, (2, *windows.shape)))
    assert logits.shape[-1] == cfg.vocab_out
    np.testing.assert_allclose(kernels.logits_at(params, windows), logits, atol=1e-12, rtol=0)
    index = np.arange(len(windows)) % cfg.n_ctx
    at = kernels.logits_at(params, windows, index)
    np.testing.assert_allclose(at, logits[:, np.arange(len(windows)), index], atol=1e-12, rtol=0)
    causal = Params.stack(cfg.replace(causal=True), [params.seed(0), params.seed(1)])
    assert np.abs(kernels.logits_at(causal, windows) - logits).max() > 1e-3  # the mask matters


def test_a_compiled_program_runs_on_the_compiled_engine_and_training_still_refuses_it(tmp_path):
    """The logits, and the held-out loss and rule error of its recorded set (the program's
    value at each position), as the reference's; training refuses it."""
    from flatformer import rasp
    from flatformer.engine.engines import REFERENCE
    from flatformer.rasp import library
    from flatformer.rasp.compile import compile_rasp_to_model
    from flatformer.rasp.run import write_compiled_run
    from flatformer.rasp.validate import validate
    from flatformer.store.runs import load_run

    program = library.make_reverse(rasp.tokens)
    compiled = compile_rasp_to_model(program, [1, 2, 3], 5)
    cfg = compiled.cfg
    assert not cfg.causal and cfg.vocab_out != cfg.d_vocab and kernels.supports(cfg)
    params = Params.stack(cfg, [compiled.tensors])
    inputs = np.array([[1, 2, 3, 3, 1], [2, 2, 1, 3, 3]])
    windows = np.array([compiled.encode(list(xs)) for xs in inputs])
    fast = kernels.logits_at(params, windows)
    reference, _ = forward(params, windows[None])
    np.testing.assert_allclose(fast, reference, atol=1e-12, rtol=0)
    for xs, row in zip(inputs, fast[0]):
        assert [compiled.classes[c] for c in row.argmax(-1)[1:]] == list(xs[::-1])
    write_compiled_run(program, compiled, validate(program, compiled), "reverse", tmp_path / "r")
    data = load_run(tmp_path / "r").data()
    loss, err = kernels.evaluate(params, data)
    expected_loss, expected_err = REFERENCE.evaluate(params, data)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-12, atol=0)
    assert err == expected_err == 0.0
    with pytest.raises(FlatformerError, match="training .next-token prediction. computes causal"):
        choose(cfg, get_recipe("paper"), "numba")


def test_the_attention_rate_never_reaches_the_compiled_path():
    """attn_coeff below 1 is the NumPy engine's alone: auto takes it there, numba refuses."""
    cfg = CONFIGS["paper-2d"].replace(attn_coeff=0.5)
    assert kernels.supports(CONFIGS["paper-2d"]) and not kernels.supports(cfg)
    assert choose(cfg, None, "auto") == NUMPY
    with pytest.raises(FlatformerError, match="compiled engine does not cover"):
        choose(cfg, None, "numba")


def test_the_numpy_engine_never_touches_the_compiled_kernels(tmp_path, monkeypatch):
    """--engine numpy: training, its evaluations and the compile notice all stay in model.py,
    though the compiled path covers the model and `auto` would take it."""
    from flatformer.training.jobs import JobSpec
    from flatformer.publish.pipeline import train_job

    spec = JobSpec("plus-last-even", out_dir=tmp_path / "run", overrides={"steps": 200})
    assert spec.build()[0].engine == COMPILED  # auto: the kernels, without the patch below

    def refuse(*args, **kwargs):
        raise AssertionError("a compiled kernel ran under --engine numpy")

    for name in ("train_steps", "evaluate", "logits_at", "loss_and_gradients", "cold"):
        monkeypatch.setattr(kernels, name, refuse)
    job, _ = JobSpec(
        "plus-last-even", out_dir=tmp_path / "run", overrides={"steps": 200}, engine="numpy"
    ).build()
    assert job.engine == NUMPY
    trainer = train_job(job)
    assert trainer.step == 200 and len(trainer.metrics[0]) == 2
    assert np.isfinite(trainer.metrics[0][-1]["val_loss"])


def test_the_engine_is_chosen_once_and_kept(monkeypatch):
    """choose() is the one decision: auto takes the kernels for a small float64 model, not for
    float32 or a full batch; numba is refused where they do not cover the model; an Engine
    given is kept as it is (dataclasses.replace of a Job does not choose again)."""
    import dataclasses

    cfg = preset("paper-2d", 12)
    assert choose(cfg, get_recipe("paper")) == COMPILED
    assert choose(cfg, get_recipe("paper", dtype="float32")) == NUMPY
    assert choose(cfg, get_recipe("paper", full_batch=True)) == NUMPY
    assert choose(cfg, get_recipe("paper", full_batch=True), "numba") == COMPILED
    assert choose(cfg, get_recipe("paper"), "numpy") == NUMPY
    with pytest.raises(FlatformerError, match="engine numpy"):
        choose(cfg, get_recipe("paper", dtype="float32"), "numba")
    job = Job(TASK, cfg, get_recipe("paper"), [0, 1], [None, None], engine="numpy")
    monkeypatch.setattr(kernels, "preferred", lambda cfg, dtype: True)
    assert dataclasses.replace(job, seeds=[0], out_dirs=[None]).engine == NUMPY


def test_every_cached_kernel_is_stamped_with_the_whole_package():
    """numba would key a kernel's cache to its own file only, though the callees it inlines
    live in others: each kernel's stamp must be the package's, so editing any of them
    discards every kernel's cached code (kernels.cold then says a compile is due)."""
    from flatformer.engine.kernels import intrinsics

    stamped = [
        d
        for module in vars(kernels).values()
        if getattr(module, "__name__", "").startswith("flatformer.engine.kernels.")
        for d in vars(module).values()
        if getattr(d, "_cache", None) is not None and hasattr(d._cache, "_cache_file")
    ]
    assert {d.py_func.__name__ for d in stamped} >= {"train_chunk", "linear", "exp"}
    assert all(d._cache._cache_file._source_stamp == intrinsics.STAMP for d in stamped)
    files = {name for name, *_ in intrinsics.STAMP}
    assert {"primitives.py", "entries.py", "passes.py"} <= files


def test_a_kernel_compiles_once_for_the_constants_its_callers_pass():
    """intrinsics.unliteral: linear is called with constants (bias -1, relu True or False, col0
    0) and with variables; without fastmath it compiles for their types only, not per value."""
    from numba import njit

    from flatformer.engine.kernels import intrinsics

    @intrinsics.njit(nogil=True)
    def callee(x, flag, k):
        return x + (1.0 if flag else 0.0) + k

    plain = njit(nogil=True)(callee.py_func)  # numba's own: one compile per constant

    @njit
    def caller(x):
        return callee(x, True, -1) + callee(x, False, 2) + callee(x, x > 0.0, int(x))

    @njit
    def plain_caller(x):
        return plain(x, True, -1) + plain(x, False, 2) + plain(x, x > 0.0, int(x))

    assert caller(1.0) == plain_caller(1.0) == (1 + 1 - 1) + (1 + 0 + 2) + (1 + 1 + 1)
    assert len(callee.signatures) == 1 and len(plain.signatures) == 3
