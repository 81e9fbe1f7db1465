"""Hostile files and folders at every reader and writer the store serves: FIFOs where a file is
read or written (refused at once, never waited on), /dev/zero behind a link, 100,000-deep JSON,
array headers declaring 96e9 values, a corrupt .mat, and writes that are not ours alone (an
import into someone's folder, through a link, two at once, after a kill; an export through a
link). Each ends in one line and a non-zero exit, and nothing the user had changes."""

import contextlib
import io
import os
import signal
import tracemalloc
import zipfile

import numpy as np
import pytest
from clitools import assert_one_line_error, cli_here
from test_import_nanogpt import write_source

from flatformer.errors import FlatformerError

DEEP = "[" * 100_000 + "]" * 100_000


@contextlib.contextmanager
def within(seconds: int = 20):
    """Fail, rather than hang the suite, when a reader waits on a FIFO."""

    def timeout(*_):
        raise TimeoutError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused(*args, words=()):
    with within():
        tracemalloc.start()
        try:
            result = cli_here(*args)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert_one_line_error(result, *words)
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MB allocated"
    return result


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("source")
    write_source(folder)
    return folder


def fifo(path):
    os.mkfifo(path)
    return path


def zero_link(path):
    path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("make", [fifo, zero_link], ids=["fifo", "dev-zero"])
def test_a_checkpoint_to_import_that_is_not_a_file(tmp_path, source, make):
    refused("import", make(tmp_path / "ckpt.pt"), "--format", "nanogpt", "--out", tmp_path / "r",
            words=["ckpt.pt", "not a file"])  # fmt: skip
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("make", [fifo, zero_link], ids=["fifo", "dev-zero"])
def test_a_meta_pkl_that_is_not_a_file(tmp_path, source, make):
    refused("import", source / "ckpt.pt", "--vocab", make(tmp_path / "meta.pkl"),
            "--out", tmp_path / "r", words=["meta.pkl", "not a file"])  # fmt: skip


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
@pytest.mark.parametrize("spoil", ["fifo", "deep"])
def test_a_hugging_face_folders_json_that_is_not_sane(tmp_path, name, spoil):
    from flatformer.importers import hf_gpt2, tokenizer

    path = tmp_path / name
    fifo(path) if spoil == "fifo" else path.write_text(DEEP)
    with within(), pytest.raises(FlatformerError, match="not a file|nested more than"):
        if name == "config.json":
            hf_gpt2.read(tmp_path)
        else:
            tokenizer.read_folder(tmp_path)


@pytest.mark.parametrize("spoil", ["fifo", "deep", "dev-zero"])
def test_a_prompts_file_that_is_not_sane(paper_run, tmp_path, spoil):
    path = tmp_path / "prompts.jsonl"
    if spoil == "fifo":
        fifo(path)
    elif spoil == "dev-zero":
        zero_link(path)
    else:
        path.write_text('{"prompt": ' + DEEP + ', "target": "1"}\n')
    refused("circuits", paper_run, "--prompts", path, words=["prompts"])


def test_a_fifo_as_the_prompts_output_is_refused_and_kept(paper_run, tmp_path):
    target = fifo(tmp_path / "out.jsonl")
    refused("prompts", paper_run, "--out", target, words=["not a regular file"])
    assert target.is_fifo()


@pytest.mark.parametrize("suffix", [".npz", ".mat"])
def test_an_export_through_a_link_or_into_a_fifo_is_refused(paper_run, tmp_path, suffix):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / f"link{suffix}").symlink_to(victim)
    refused("geometry", paper_run, "--export", tmp_path / f"link{suffix}", words=["symbolic link"])
    refused("geometry", paper_run, "--export", fifo(tmp_path / f"f{suffix}"),
            words=["not a regular file"])  # fmt: skip
    assert victim.read_text() == "mine"


def test_geometry_figures_never_follow_a_linked_folder(paper_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(paper_run, run)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "geometry").symlink_to(elsewhere)
    refused("geometry", run, "--figures", words=["symbolic link"])
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("spoil", ["fifo", "dev-zero", "huge"])
def test_a_stimuli_file_that_is_not_sane(paper_run, tmp_path, spoil):
    path = tmp_path / "stimuli.txt"
    if spoil == "fifo":
        fifo(path)
    elif spoil == "dev-zero":
        zero_link(path)
    else:
        with open(path, "wb") as f:  # 3 GB, sparse: nothing is written
            f.truncate(3 * 2**30)
    refused("geometry", paper_run, "--stimuli", path, words=["--stimuli"])


def npy_header(shape) -> bytes:
    from numpy.lib import format as npy

    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    npy.write_array_header_1_0(buffer, header)  # the magic string and the header
    return buffer.getvalue()


@pytest.mark.parametrize("kind", [".npy", ".npz", ".mat", "dev-zero.npy"])
def test_recordings_that_declare_more_than_they_hold(paper_run, tmp_path, kind):
    path = tmp_path / f"data{kind}"
    huge = npy_header((96, 1_000_000_000))  # 96e9 values
    if kind == ".npy":
        path.write_bytes(huge + b"\0" * 64)
    elif kind == ".npz":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("data.npy", huge + b"\0" * 64)
    elif kind == ".mat":
        from scipy.io import savemat

        savemat(path, {"data": np.ones((96, 4))}, do_compression=True)
        data = bytearray(path.read_bytes())
        data[200:240] = b"\xff" * 40  # inside the compressed variable
        path.write_bytes(bytes(data))
    else:
        zero_link(path)
    words = ["96,000,000,000 values"] if kind in (".npy", ".npz") else ["--data"]
    refused("geometry", paper_run, "--data", path, words=words)


def test_import_into_someones_folder_leaves_it_alone(tmp_path, source):
    out = tmp_path / "theirs"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "step_000000.safetensors").write_bytes(b"their checkpoint")
    refused("import", source / "ckpt.pt", "--out", out, words=["not empty"])
    assert (out / "checkpoints" / "step_000000.safetensors").read_bytes() == b"their checkpoint"
    assert sorted(p.name for p in out.rglob("*")) == ["checkpoints", "step_000000.safetensors"]


def test_import_out_that_is_a_link_is_refused(tmp_path, source):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    refused("import", source / "ckpt.pt", "--out", tmp_path / "link", words=["symbolic link"])
    assert list(target.iterdir()) == []


def test_a_second_import_into_the_same_folder_is_refused_by_the_lock(tmp_path, source):
    from flatformer.store.lock import hold

    out = tmp_path / "run"
    with hold(out, "an import"):  # the first import, still writing
        refused("import", source / "ckpt.pt", "--out", out, words=["in use", str(os.getpid())])
    assert not (out / "config.json").exists()


def test_a_killed_imports_temporary_is_cleared_by_the_rerun(tmp_path, source):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / ".lock").write_text("12345\n")
    left = out / "checkpoints" / "step_000000.safetensors.0123456789ab.tmp"
    left.write_bytes(b"\0" * 4096)
    result = cli_here("import", source / "ckpt.pt", "--out", out)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000000.safetensors"]


def test_a_finished_import_is_never_replaced(tmp_path, source):
    out = tmp_path / "run"
    assert cli_here("import", source / "ckpt.pt", "--out", out).returncode == 0
    before = (out / "checkpoints" / "step_000000.safetensors").read_bytes()
    refused("import", source / "ckpt.pt", "--out", out, words=["already holds a run"])
    assert (out / "checkpoints" / "step_000000.safetensors").read_bytes() == before


@pytest.mark.parametrize("spoil", ["not-utf8", "deep", "fifo"])
def test_reproduce_reads_a_spoiled_config_as_another_run(tmp_path, spoil):
    from flatformer.publish.reproduce import prepare_folder

    (tmp_path / "run").mkdir()
    config = tmp_path / "run" / "config.json"
    if spoil == "fifo":
        fifo(config)
    else:
        config.write_bytes(b"\xc3\x28{}" if spoil == "not-utf8" else DEEP.encode())
    with within(), pytest.raises(FlatformerError, match="holds a different run"):
        prepare_folder(tmp_path, {"task": "plus-last-even"}, force=False)


GOOD = [{"seed": 0, "step": 10, "train_loss": 0.1, "val_loss": 0.2, "rule_error": 0.0}]


@pytest.mark.parametrize(
    "rows",
    [GOOD, None, "rows", [1, 2], [{"seed": 0}], [{**GOOD[0], "step": "1"}],
     [{**GOOD[0], "seed": 1}], [{**GOOD[0], "val_loss": [0.2]}]],
)  # fmt: skip
def test_a_done_json_with_bad_rows_means_the_job_is_trained_again(tmp_path, rows):
    import json

    from flatformer.store.layout import checkpoint_path, seed_folder
    from flatformer.sweep.plan import _identity
    from flatformer.sweep.worker import finished

    job = {"folder": str(tmp_path), "seeds": [0, 0], "steps": 10, "name": "j", "task": "t",
           "preset": "p", "recipe": "r", "overrides": {}}  # fmt: skip
    last = checkpoint_path(seed_folder(tmp_path, 0), 10)
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")  # finished() asks only that it exists
    done = {"job": _identity(job), "rows": rows, "seconds": 1.0}
    (tmp_path / "done.json").write_text(json.dumps(done))
    assert finished(job) == (done if rows is GOOD else None)


def test_a_newline_in_the_folder_does_not_break_joining_a_movie(tmp_path):
    from flatformer.movies.encode import join_mp4, open_part

    folder = tmp_path / "a\nb"
    folder.mkdir()
    parts = []
    for j in range(2):
        parts.append(folder / f".m.part{j}.mp4")
        part = open_part("mp4", parts[-1], 10)
        for _ in range(3):
            part.append(np.full((64, 64, 4), 255, np.uint8))
        part.close()
    join_mp4(parts, folder / "m.mp4")
    assert sorted(p.name for p in folder.iterdir()) == ["m.mp4"]
