"""Faults and concurrent use: one writer per run folder (a killed holder's lock is taken
over), a full disk in the middle of a checkpoint, and jobs too large for the machine."""

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from clitools import assert_one_line_error, cli_here
from flatformer.errors import FlatformerError
from flatformer.training.jobs import build_job
from flatformer.store.lock import hold, holder
from flatformer.store.resources import check_fits, estimate, memory_needed
from flatformer.store.checkpoints import read_checkpoint
from flatformer.store.runs import load_run, read_metrics
from flatformer.store.write import WriteFailed
from flatformer.training.trainer import train

SHORT = ["--recipe", "paper", "--steps", "600"]


def short_job(folder, seeds=None, **sets):
    pairs = [f"{k}={v}" for k, v in {"steps": 600, **sets}.items()]
    return build_job("plus-last-even", None, "paper", 0, seeds, folder, pairs)[0]


def checkpoint_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted((folder / "checkpoints").iterdir())}


@pytest.fixture
def holder_process(tmp_path):
    """Another process holding the run folder's lock, as a second `train` would."""
    folder = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from flatformer.store.lock import hold\n"
            f"with hold({str(folder)!r}, 'training'):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    yield folder, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_writer_is_refused_with_the_holders_pid(holder_process):
    folder, proc = holder_process
    for extra in ([], ["--resume"]):
        result = cli_here("train", "plus-last-even", *SHORT, "--out", folder, *extra)
        assert_one_line_error(result, "in use", f"process {proc.pid}")
    assert not (folder / "checkpoints").exists()


def test_a_killed_holders_lock_is_taken_over(holder_process):
    folder, proc = holder_process
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert holder(folder) == proc.pid  # the dead process's pid is still written there
    result = cli_here("train", "plus-last-even", *SHORT, "--out", folder)
    assert result.returncode == 0, result.stderr
    assert load_run(folder).steps[-1] == 600


def test_a_sweep_into_a_folder_being_written_is_refused(tmp_path):
    (tmp_path / "s.toml").write_text(
        'tasks = ["plus-last-even"]\nrecipes = ["paper"]\nseeds = "0-1"\n[set]\nsteps = 100\n'
    )
    with hold(tmp_path / "sweep", "a sweep"):
        result = cli_here("sweep", tmp_path / "s.toml", "--out", tmp_path / "sweep")
    assert_one_line_error(result, "in use", f"process {os.getpid()}")


class FullDisk:
    """open() for flatformer.store.write whose files fail the n-th write or append to a matching file
    halfway, with ENOSPC, as a disk filling up mid-write does (counted by writes, not opens:
    a file may stay open for many appends)."""

    def __init__(self, fail_at: int, match: str):
        self.count, self.fail_at, self.match = 0, fail_at, match

    def __call__(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        if ("w" in mode or "a" in mode) and self.match in str(path):
            write = f.write

            def counted(data):
                self.count += 1
                if self.count == self.fail_at:
                    write(data[: len(data) // 2])
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                return write(data)

            f.write = counted
        return f


@pytest.mark.parametrize("match", ["safetensors", "metrics.jsonl"])
def test_a_full_disk_mid_write_keeps_the_last_checkpoint_and_metrics(tmp_path, monkeypatch, match):
    whole = tmp_path / "whole"
    train(short_job(whole))
    folder = tmp_path / "run"
    # The 4th checkpoint is step 300; metrics are written at 0, 200, 400: the 3rd is step 400.
    monkeypatch.setattr(
        "flatformer.store.write.open",
        FullDisk(fail_at=4 if match != "metrics.jsonl" else 3, match=match),
        raising=False,
    )
    with pytest.raises(WriteFailed, match="No space left on device.*--resume"):
        train(short_job(folder))
    monkeypatch.undo()
    assert not list(folder.rglob("*.tmp"))
    run = load_run(folder)
    for step in run.steps:  # every checkpoint left is whole
        read_checkpoint(folder / f"checkpoints/step_{step:06d}.safetensors")
    assert run.steps[-1] == (300 if match == "metrics.jsonl" else 200)
    rows = read_metrics(folder)
    assert len(rows) == len((folder / "metrics.jsonl").read_text().splitlines())
    assert rows == read_metrics(whole)[: len(rows)]
    result = cli_here("train", "plus-last-even", *SHORT, "--out", folder, "--resume")
    assert result.returncode == 0, result.stderr
    assert checkpoint_bytes(folder) == checkpoint_bytes(whole)
    assert (folder / "metrics.jsonl").read_bytes() == (whole / "metrics.jsonl").read_bytes()


def test_too_much_memory_is_refused_with_both_numbers_and_what_fits(tmp_path):
    job = short_job(tmp_path / "many", seeds="0-63", d_mlp=4096)
    need = estimate(job).memory
    available = (need + memory_needed(job.cfg, job.recipe, 1)) // 2
    with pytest.raises(FlatformerError) as refusal:
        check_fits(job, memory=available, disk=10**15)
    message = str(refusal.value)
    fit = int(message.split("at most ")[1].split()[0])
    assert f"{need / 1e9:,.1f} GB" in message and f"{available / 1e9:,.1f} GB" in message
    assert memory_needed(job.cfg, job.recipe, fit) <= available
    assert memory_needed(job.cfg, job.recipe, fit + 1) > available
    assert f"--seeds 0-{fit - 1}" in message
    assert not (tmp_path / "many").exists()


def test_too_much_disk_is_refused_with_a_checkpoint_interval_that_fits(tmp_path):
    job = short_job(tmp_path / "run", steps=100_000)
    needs = estimate(job)
    free = needs.disk // 10
    with pytest.raises(FlatformerError, match="checkpoint_every=") as refusal:
        check_fits(job, memory=10**15, disk=free)
    every = int(str(refusal.value).split("checkpoint_every=")[1].split()[0])
    sparser = short_job(tmp_path / "run", steps=100_000, checkpoint_every=every)
    check_fits(sparser, memory=10**15, disk=free)  # the suggestion does fit
    assert estimate(job).checkpoints == 100_000 // 100 + 1


def test_the_interval_suggested_with_candidates_is_one_the_recipe_takes(tmp_path):
    """With candidates, checkpoint_every must divide select_step: the suggestion does."""
    sets = dict(steps=100_000, candidates=4, select_step=1200, checkpoint_every=100)
    job = short_job(tmp_path / "run", **sets)
    free = estimate(job).disk // 10
    with pytest.raises(FlatformerError, match="checkpoint_every=") as refusal:
        check_fits(job, memory=10**15, disk=free)
    every = int(str(refusal.value).split("checkpoint_every=")[1].split()[0])
    assert 1200 % every == 0
    sparser = short_job(tmp_path / "run", **dict(sets, checkpoint_every=every))
    check_fits(sparser, memory=10**15, disk=free)


def test_a_resumed_run_counts_only_the_checkpoints_still_to_come(tmp_path):
    job = short_job(tmp_path / "run")
    train(job)
    assert estimate(job).checkpoints == 0
    (tmp_path / "run/checkpoints/step_000600.safetensors").unlink()
    assert estimate(job).checkpoints == 1
    assert json.loads((tmp_path / "run/config.json").read_text())["recipe"]["steps"] == 600


def test_the_estimate_uses_the_trainers_sizes():
    from flatformer.store import resources
    from flatformer.training import trainer as train

    assert (resources.GROUP_MEMBERS, resources.TRAIN_CHUNK) == (train.MAX_MEMBERS, train.CHUNK)
