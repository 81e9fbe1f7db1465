"""The figures' drawing processes: one that dies ends the command in one line naming its
figure (never a hang), and a parent that is killed or interrupted leaves none behind."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flatformer.errors import FlatformerError
from flatformer.publish.pipeline import draw_suite


def killed(ctx):
    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel does to a process out of memory


def quick(ctx):
    return None


def test_a_killed_worker_ends_the_command_in_one_line_naming_its_figure(
    paper_run, tmp_path, monkeypatch
):
    import flatformer.figures as figures

    registry = {"fig_quick": (quick, lambda data: None), "fig_killed": (killed, None)}
    monkeypatch.setattr(figures, "figures_for", lambda task: registry)
    monkeypatch.setattr("flatformer.publish.pipeline.save", lambda fig, path, fmt: None)
    started = time.perf_counter()
    with pytest.raises(FlatformerError) as error:
        draw_suite(paper_run, out_dir=tmp_path / "out", jobs=2)
    assert time.perf_counter() - started < 30
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("drawing fig_killed: its process was killed by SIGKILL")
    assert "--only fig_killed --jobs 1" in message
    assert multiprocessing.active_children() == []


STALLING = """
import os, sys, time
from pathlib import Path
import flatformer.figures as figures
from flatformer.publish.pipeline import draw_suite

def stall(ctx):
    Path(sys.argv[2], str(os.getpid())).touch()
    time.sleep(300)

figures.figures_for = lambda task: {"a_stall": (stall, None), "b_stall": (stall, None)}
draw_suite(Path(sys.argv[1]), out_dir=Path(sys.argv[3]), jobs=2)
"""


def gone(pid: int) -> bool:
    """No such process, or only its exit status is left (a zombie draws nothing)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_parent_killed_or_interrupted_leaves_no_worker(paper_run, tmp_path, sig):
    pids = tmp_path / "pids"
    pids.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", STALLING, str(paper_run), str(pids), str(tmp_path / "out")],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while len(list(pids.iterdir())) < 2:
            assert parent.poll() is None and time.time() < deadline
            time.sleep(0.1)
        workers = [int(p.name) for p in pids.iterdir()]
        assert not any(gone(pid) for pid in workers)
        parent.send_signal(sig)
        parent.wait(30)
        deadline = time.time() + 10
        while not all(gone(pid) for pid in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert [pid for pid in workers if not gone(pid)] == []
    finally:
        parent.kill()
        parent.wait()
