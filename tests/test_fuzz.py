"""Property-based fuzzing of every loader and parser that reads outside input: whatever the
bytes, each either returns a well-formed result or raises FlatformerError (which the command
line says in one line), never another exception. Examples are few and small: the suite has a
time budget; the hostile cases in test_hostile.py and the browser's URL-hash fuzzing in
test_explorer_hostile.py cover the rest."""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatformer.errors import FlatformerError

FUZZ = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def refused_or(fn, *args):
    """fn(*args), or None when it raised FlatformerError; any other exception fails the test."""
    try:
        return fn(*args)
    except FlatformerError:
        return None


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


# ---- safetensors checkpoints: headers and bodies ----


def header_bytes(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + body


tensor_entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F64", "F32", "I64", "U8", "BOOL", "F16", "X"]),
        "shape": st.lists(st.integers(0, 2**40), max_size=4),
        "data_offsets": st.lists(st.integers(-5, 2**40), min_size=2, max_size=2),
    }
)
checkpoints = st.one_of(
    st.binary(max_size=300),
    st.builds(
        header_bytes,
        st.dictionaries(st.text(max_size=12), tensor_entries, max_size=3),
        st.binary(max_size=200),
    ),
    st.builds(
        lambda n, rest: n.to_bytes(8, "little") + rest,
        st.integers(0, 2**64 - 1),
        st.binary(max_size=100),
    ),
)


@FUZZ
@given(checkpoints)
def test_checkpoint_bytes(folder, data):
    from flatformer.store.checkpoints import read_checkpoint

    path = folder / "step_000000.safetensors"
    path.write_bytes(data)
    result = refused_or(read_checkpoint, path)
    if result is not None:
        for t in {**result[0], **result[1]}.values():
            assert t.dtype == np.float64 and np.all(np.isfinite(t))


# ---- config.json of a run folder ----


def configs():
    good = {
        "task": "plus-last-even",
        "seed": 0,
        "vocab": [str(i) for i in range(11)] + ["+"],
        "model": {
            "d_model": 2,
            "n_heads": 1,
            "d_head": 2,
            "n_layers": 1,
            "d_mlp": 32,
            "n_ctx": 8,
            "d_vocab": 12,
        },
    }
    spoiled = st.tuples(
        st.sampled_from(["task", "seed", "vocab", "model", "data_seed", "corpus", "task_settings"]),
        json_values,
    ).map(lambda kv: {**good, kv[0]: kv[1]})
    model_spoiled = st.tuples(
        st.sampled_from(list(good["model"]) + ["act_fn", "qkv_bias", "x"]), json_values
    ).map(lambda kv: {**good, "model": {**good["model"], kv[0]: kv[1]}})
    return st.one_of(spoiled, model_spoiled, json_values).map(
        lambda c: json.dumps(c).encode()
    ) | st.binary(max_size=200)


@FUZZ
@given(configs())
def test_run_config(folder, data):
    from flatformer.store.runs import load_run

    (folder / "config.json").write_bytes(data)
    run = refused_or(load_run, folder)
    if run is not None:
        task = refused_or(lambda: run.task)
        assert task is None or len(task.vocab) == run.cfg.d_vocab


# ---- metrics.jsonl ----

metrics_lines = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.builds(
            lambda s, x: json.dumps(
                {"step": s, "train_loss": x, "val_loss": x, "rule_error": x}
            ).encode(),
            st.integers(0, 10**6),
            st.floats(allow_nan=False),
        ),
        json_values.map(lambda v: json.dumps(v).encode()),
    ),
    max_size=8,
)


@FUZZ
@given(metrics_lines)
def test_metrics_lines(folder, lines):
    from flatformer.store.runs import read_metrics

    (folder / "metrics.jsonl").write_bytes(b"\n".join(lines))
    rows = read_metrics(folder)
    assert all(isinstance(r, dict) and type(r["step"]) is int for r in rows)


# ---- sweep files ----


def toml_value(v):
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)


sweep_values = {
    "tasks": st.one_of(st.just(["plus-last-even"]), json_values),
    "recipes": st.one_of(
        st.just(["paper"]), st.lists(st.sampled_from(["paper", "default", "x"]), max_size=2)
    ),
    "seeds": st.one_of(st.from_regex(r"\A-?\d{1,6}(-\d{0,9})?\Z"), json_values),
    "presets": st.one_of(st.just(["paper-2d"]), json_values),
    "sets": st.lists(
        st.dictionaries(
            st.sampled_from(["lr", "steps", "d_mlp", "x/y", "betas"]), json_values, max_size=2
        ),
        max_size=3,
    ),
}


@st.composite
def sweep_files(draw):
    if draw(st.booleans()):
        return draw(st.text(max_size=200))
    keys = ["tasks", "recipes", "seeds"] + draw(
        st.lists(st.sampled_from(["presets", "sets"]), unique=True)
    )
    keys = [k for k in keys if draw(st.integers(0, 9))]  # now and then a needed key is missing
    lines = [f"{k} = {toml_value(draw(sweep_values[k]))}" for k in keys]
    return "\n".join(lines) + "\n[set]\nsteps = 100\n"


@FUZZ
@given(sweep_files())
def test_sweep_files(folder, text):
    from flatformer.sweep import expand, load_sweep

    path = folder / "s.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    sweep = refused_or(load_sweep, path)
    if sweep is not None:
        jobs = refused_or(expand, sweep, folder / "out")
        assert jobs is None or all(j["steps"] == 100 for j in jobs)
    assert not (folder / "out").exists()


# ---- corpus text in any encoding, and prompts ----


@FUZZ
@given(
    st.text(min_size=0, max_size=600),
    st.sampled_from(["utf-8", "utf-16", "latin-1", "cp1252", "shift_jis", "utf-8-sig", "utf-32"]),
    st.sampled_from(["word", "char"]),
    st.text(max_size=40),
)
def test_corpus_text_and_its_prompts(folder, text, encoding, tokenizer, prompt):
    from flatformer.tasks.corpus import CorpusTask

    path = folder / "corpus.txt"
    path.write_bytes(text.encode(encoding, errors="replace"))
    task = refused_or(CorpusTask.from_file, path, tokenizer)
    if task is not None:
        tokens = refused_or(task.encode, prompt)
        assert tokens is None or all(0 <= t < len(task.vocab) for t in tokens)


@FUZZ
@given(st.text(max_size=60))
def test_prompts_of_a_task(prompt):
    from flatformer.tasks import get_task

    task = get_task("plus-last-even")
    tokens = refused_or(task.encode, prompt)
    assert tokens is None or all(0 <= t < len(task.vocab) for t in tokens)


# ---- --set values ----


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "lr",
                    "steps",
                    "d_mlp",
                    "n_ctx",
                    "betas",
                    "eps",
                    "candidates",
                    "batch_size",
                    "data_seed",
                    "act_fn",
                    "schedule",
                    "qkv_bias",
                    "colour",
                    "",
                ]
            ),
            st.one_of(st.text(max_size=12), json_values.map(json.dumps)),
        ),
        max_size=4,
    )
)
def test_set_values(folder, pairs):
    from flatformer.training.jobs import build_job

    sets = [f"{k}={v}" for k, v in pairs]
    built = refused_or(build_job, "plus-last-even", None, "paper", 0, None, folder / "run", sets)
    if built is not None:
        job, _ = built
        assert job.cfg.n_params >= 1 and job.recipe.steps >= 1
    assert not (folder / "run").exists()


# ---- the readers of files people hand an import or a command ----


@FUZZ
@given(st.one_of(json_values.map(json.dumps), st.text(max_size=200)))
def test_tokenizer_json(folder, text):
    """A folder's tokenizer.json: a tokenizer the library reads, or one line."""
    from flatformer.importers.tokenizer import read_folder

    source = folder / "tokenizer"
    source.mkdir(exist_ok=True)
    (source / "tokenizer.json").write_text(text)
    assert refused_or(read_folder, source) in (None, text)


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(inner.filter(
        lambda k: isinstance(k, (int, str))), inner, max_size=6),
    max_leaves=16,
)  # fmt: skip


@FUZZ
@given(st.one_of(plain.map(lambda v: {"itos": v}), plain), st.binary(max_size=40))
def test_meta_pkl(folder, meta, noise):
    """nanoGPT's meta.pkl: plain data of any shape (mixed keys, long strings, no itos), or
    bytes that are no pickle at all; a vocabulary of single characters, or one line."""
    import pickle

    from flatformer.importers.vocab import read_meta

    for data in (pickle.dumps(meta), noise):
        (folder / "meta.pkl").write_bytes(data)
        chars = refused_or(read_meta, folder / "meta.pkl")
        assert chars is None or all(isinstance(c, str) and len(c) == 1 for c in chars)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["prompt", "target", "corrupt", "corrupt_target", "x"]),
                json_values,
                max_size=4,
            ).map(json.dumps),
            st.text(max_size=40),
        ),
        max_size=4,
    )
)
def test_prompts_files(folder, lines):
    """A prompts file for `circuits --prompts` or `analyze --prompts`: every line checked."""
    from flatformer.tasks.prompts import read_examples
    from flatformer.tasks import get_task

    (folder / "prompts.jsonl").write_text("\n".join(lines))
    read = refused_or(read_examples, folder / "prompts.jsonl", get_task("plus-last-even"), 8)
    assert read is None or len(read[0]) == len(read[1]) == len(read[2])


@FUZZ
@given(
    st.sampled_from([".npy", ".csv"]),
    st.lists(st.integers(0, 30), min_size=1, max_size=3),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.binary(max_size=60),
)
def test_recordings(folder, suffix, shape, fill, noise):
    """`geometry --data`: arrays of any shape and values, and bytes that are no array."""
    from flatformer.rsa.data import load_recordings

    path = folder / f"rec{suffix}"
    x = np.full(shape, fill)
    for spoil in (False, True):
        if spoil:
            path.write_bytes(noise)
        elif suffix == ".npy":
            np.save(path, x)
        else:
            path.write_text("\n".join(",".join(map(str, row)) for row in np.atleast_2d(x)))
        got = refused_or(load_recordings, path, shape[0])
        assert got is None or (got.ndim in (2, 3) and np.isfinite(got).all())


def test_recordings_with_more_repeats_than_their_rdms_fit_are_refused(folder):
    """One RDM a repeat: 30 repeats of 2,000 stimuli are 60 million dissimilarities."""
    from flatformer.rsa.data import load_recordings

    np.save(folder / "repeats.npy", np.zeros((2000, 30, 1)))
    with pytest.raises(FlatformerError, match="30 repeats of 2000 stimuli.*at most 25 repeats"):
        load_recordings(folder / "repeats.npy", 2000)
