"""Hostile input, as a careless or malicious user would type it: every case ends in one line,
a non-zero exit and no traceback, within seconds and without allocating more than a few MB
(the command runs in this process, under tracemalloc, which NumPy reports its arrays to)."""

import json
import shutil
import time
import tracemalloc

import pytest

from clitools import assert_one_line_error, cli_here

RUN = "RUN"  # stands for a copy of the trained paper run
# A 12.6-million-parameter model: within every limit, but 100 seeds of it (x 8 candidates)
# need far more memory than any machine this runs on, and a checkpoint every step far more disk.
WIDE = ["--preset", "simulator-16d"] + [
    x
    for kv in ("d_model=512", "d_mlp=2048", "n_heads=8", "d_head=64", "n_layers=4")
    for x in ("--set", kv)
]
TOML = 'tasks = ["plus-last-even"]\nrecipes = ["paper"]\nseeds = "{seeds}"\n[set]\nsteps = 100\n'

# (arguments, words the one line must contain). Files named here are made by `files`.
CASES = [
    # numbers out of range, NaN and infinities, for training
    (["train", "plus-last-even", "--steps", "-5"], ["steps", "1..10,000,000"]),
    (["train", "plus-last-even", "--steps", "1000000000000"], ["steps", "1..10,000,000"]),
    (["train", "plus-last-even", "--steps", "abc"], ["--steps", "integer"]),
    (["train", "plus-last-even", "--seeds", "0-99999999"], ["number of seeds", "1..10,000"]),
    (["train", "plus-last-even", "--seed", "99999999999999999999999"], ["--seed", "0..4,"]),
    (["train", "plus-last-even", "--seed", "-1"], ["--seed"]),
    (["train", "plus-last-even", "--set", "lr=NaN"], ["lr", "1e-09"]),
    (["train", "plus-last-even", "--set", "lr=-Infinity"], ["lr"]),
    (["train", "plus-last-even", "--set", "weight_decay=Infinity"], ["weight_decay", "[0, 10]"]),
    (["train", "plus-last-even", "--set", "embed_init_scale=1e308"], ["embed_init_scale"]),
    (["train", "plus-last-even", "--set", "eps=1e-400"], ["eps"]),
    (["train", "plus-last-even", "--set", "betas=[0.9, NaN]"], ["betas"]),
    (["train", "plus-last-even", "--set", "betas=[0.9]"], ["betas", "two numbers"]),
    (["train", "plus-last-even", "--set", "min_lr_ratio=2"], ["min_lr_ratio", "[0, 1]"]),
    (["train", "plus-last-even", "--set", "eval_every=-1"], ["eval_every"]),
    (["train", "plus-last-even", "--set", "checkpoint_every=0"], ["checkpoint_every"]),
    (["train", "plus-last-even", "--set", "steps=1.5"], ["steps", "whole number"]),
    (["train", "plus-last-even", "--set", "steps=true"], ["steps", "whole number"]),
    (["train", "plus-last-even", "--set", "data_seed=1e400"], ["data_seed"]),
    (["train", "plus-last-even", "--set", "=3"], ["key=value"]),
    # sizes that would not fit any machine, refused before anything is allocated
    (["train", "plus-last-even", "--set", "batch_size=1000000000"], ["batch_size", "4,096"]),
    (["train", "plus-last-even", "--set", "candidates=100000000"], ["candidates", "1..64"]),
    (["train", "plus-last-even", "--set", "d_mlp=40000000"], ["d_mlp", "16,384"]),
    (["train", "plus-last-even", "--set", "n_ctx=100000000"], ["n_ctx", "2,048"]),
    (["train", "plus-last-even", "--set", "n_layers=100000"], ["n_layers", "1..48"]),
    (
        [
            "train",
            "plus-last-even",
            "--preset",
            "simulator-16d",
            "--set",
            "d_model=1024",
            "--set",
            "d_mlp=16384",
            "--set",
            "n_layers=48",
        ],
        ["parameters", "at most"],
    ),
    (["train", "plus-last-even", *WIDE, "--seeds", "0-99"], ["GB of memory", "available"]),
    (
        [
            "train",
            "plus-last-even",
            *WIDE,
            "--set",
            "candidates=1",
            "--set",
            "steps=10000000",
            "--set",
            "checkpoint_every=1",
        ],
        ["GB", "is free", "checkpoint_every="],
    ),
    (["gradcheck", "--vocab", "1000000000"], ["d_vocab", "100,000"]),
    (["gradcheck", "--vocab", "-3"], ["d_vocab"]),
    (["gradcheck", "--layers", "100000"], ["n_layers"]),
    # paths: empty, a file where a folder goes and the other way round, not text
    (["train", "plus-last-even", "--out", ""], ["empty argument", "--out"]),
    (["train", "plus-last-even", "--out", "afile.txt"], ["afile.txt", "not a folder"]),
    (["train", "--corpus", "latin1.txt"], ["latin1.txt", "not UTF-8"]),
    (["train", "--corpus", "adir"], ["adir", "not a file"]),
    (["corpus", "binary.txt"], ["binary.txt", "binary"]),
    (["eval", ""], ["empty argument"]),
    (["eval", "afile.txt"], ["not a flatformer run"]),
    (["explore", RUN, "--out", "adir"], ["adir", "is a folder"]),
    (["explore", RUN, "--out", "no/such/folder/x.html"], ["does not exist"]),
    (["analyze", RUN, "--prompts", "latin1.txt"], ["prompts file", "not UTF-8"]),
    (["analyze", RUN, "--prompts", "adir"], ["prompts file", "not a file"]),
    # sampling and the knobs
    (["generate", RUN, "--prompt", "4 1 +", "-n", "100000000"], ["-n", "0..10,000"]),
    (["generate", RUN, "--prompt", "4 1 +", "-n", "-1"], ["-n"]),
    (["generate", RUN, "--prompt", "4 1 +", "--temperature", "nan"], ["temperature"]),
    (["generate", RUN, "--prompt", "4 1 +", "--temperature", "inf"], ["temperature"]),
    (["generate", RUN, "--prompt", "4 1 +", "--top-p", "2"], ["top-p"]),
    (["generate", RUN, "--prompt", "4 1 +", "--top-k", "-1"], ["top-k"]),
    (["generate", RUN, "--prompt", "4 1 +", "--beta", "1e308"], ["beta", "[-1000, 1000]"]),
    (["generate", RUN, "--prompt", "4 1 +", "--beta", "nan"], ["beta"]),
    (["generate", RUN, "--prompt", "4 1 +", "--head-off", "9.9"], ["no head 9.9"]),
    (["generate", RUN, "--prompt", "\x00 <script>"], ["not in the vocabulary"]),
    (["analyze", RUN, "--k", "-1"], ["--k"]),
    (["circuits", RUN, "--tau", "nan"], ["--tau"]),
    (["circuits", RUN, "--ig-steps", "100000000"], ["--ig-steps", "1..1,000"]),
    # ports and process counts
    (["explore", RUN, "--serve", "--port", "70000"], ["--port", "0..65,535"]),
    (["explore", RUN, "--serve", "--port", "-1"], ["--port", "0..65,535"]),
    (["figures", RUN, "--jobs", "100000"], ["--jobs", "cores"]),
    (["animate", RUN, "--workers", "100000"], ["--workers", "cores"]),
    (["animate", RUN, "--fps", "100000"], ["--fps"]),
    (["compare", RUN, "--success", "nan"], ["--success"]),
    # sweep files and options
    (["sweep", "huge.toml", "--out", "sw"], ["number of seeds"]),
    (["sweep", "latin1.txt", "--out", "sw"], ["sweep file", "not UTF-8"]),
    (["sweep", "adir", "--out", "sw"], ["adir"]),
    (["sweep", "ok.toml", "--out", "sw", "--workers", "100000"], ["--workers", "cores"]),
    (["sweep", "ok.toml", "--out", "sw", "--ray", "nohost"], ["HOST:PORT"]),
    (["no-such-command"], ["No such command"]),
]

# A copy of the paper run with one file spoiled: (file, bytes or a function of the old bytes,
# words). Each is refused by `eval` in one line, before the model is built.
SPOILED = [
    ("config.json", b"\xff\xfe{}", ["run config", "not UTF-8"]),
    ("config.json", b"[1, 2, 3]", ["names no task"]),
    ("config.json", b"[" * 100_000, ["not a valid run config"]),
    (
        "config.json",
        lambda c: c.replace(b'"d_vocab": 12', b'"d_vocab": 1000000000000'),
        ["d_vocab", "100,000"],
    ),
    ("config.json", lambda c: c.replace(b'"d_mlp": 32', b'"d_mlp": "32"'), ["d_mlp"]),
    (
        "config.json",
        lambda c: c.replace(b'"qkv_bias": false', b'"qkv_bias": "no"'),
        ["qkv_bias", "true or false"],
    ),
    (
        "config.json",
        lambda c: c.replace(b'"model": {', b'"model": {"evil": 1, '),
        ["unknown model field", "evil"],
    ),
    ("config.json", lambda c: c.replace(b'"+"', b'"0"'), ["vocab", "distinct"]),
    (
        "checkpoints/step_020000.safetensors",
        lambda c: (10**15).to_bytes(8, "little") + c[8:],
        ["header length"],
    ),
    ("checkpoints/step_020000.safetensors", lambda c: absurd_shape(c), ["step_020000"]),
    ("checkpoints/step_020000.safetensors", b"", ["header length"]),
]


def absurd_shape(data: bytes) -> bytes:
    """The checkpoint with a well-formed header whose first tensor claims 6.4 GB."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [2, 400_000_000]
    header[name]["data_offsets"][1] = header[name]["data_offsets"][0] + 6_400_000_000
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data[8 + n :]


def copy_run(paper_run, folder):
    """The run's config, metrics and last checkpoint: all that `eval` and the refusals read."""
    (folder / "checkpoints").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl", "checkpoints/step_020000.safetensors"):
        shutil.copyfile(paper_run / name, folder / name)


@pytest.fixture(scope="module")
def files(paper_run, tmp_path_factory):
    """A scratch folder with the files the cases name (none of the cases writes to them)."""
    folder = tmp_path_factory.mktemp("hostile")
    copy_run(paper_run, folder / RUN)
    (folder / "afile.txt").write_text("a file\n")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me ".encode("latin-1") * 50)
    (folder / "binary.txt").write_bytes(b"text\x00\x01\x02" * 50)
    (folder / "adir").mkdir()
    (folder / "huge.toml").write_text(TOML.format(seeds="0-99999999"))
    (folder / "ok.toml").write_text(TOML.format(seeds="0-1"))
    return folder


@pytest.fixture
def place(files, monkeypatch):
    """The scratch folder as the working directory."""
    monkeypatch.chdir(files)
    return files


def refused_quickly(args, words):
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = cli_here(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_one_line_error(result, *words)
    assert time.perf_counter() - started < 10
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MB allocated"


@pytest.mark.parametrize("args, words", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_hostile_options_get_one_line(place, args, words):
    refused_quickly(args, words)
    assert not (place / "runs").exists() and not (place / "sw" / "results.csv").exists()


@pytest.mark.parametrize(
    "name, spoil, words", SPOILED, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SPOILED)]
)
def test_a_spoiled_run_folder_gets_one_line(paper_run, tmp_path, monkeypatch, name, spoil, words):
    monkeypatch.chdir(tmp_path)
    copy_run(paper_run, tmp_path / RUN)
    path = tmp_path / RUN / name
    path.write_bytes(spoil(path.read_bytes()) if callable(spoil) else spoil)
    refused_quickly(["eval", RUN], words)


def test_a_spoiled_metrics_file_keeps_the_rows_before_the_damage(paper_run, tmp_path):
    from flatformer.store.runs import read_metrics

    copy_run(paper_run, tmp_path / RUN)
    place, path = tmp_path, tmp_path / RUN / "metrics.jsonl"
    rows = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(rows[:3]) + b'{"step": "x"}\n\xff\xfe\n' + b"".join(rows[3:]))
    assert read_metrics(place / RUN) == [json.loads(r) for r in rows[:3]]
