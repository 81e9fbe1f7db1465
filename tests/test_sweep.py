"""Sweeps: ordinary run folders, the same rows locally and on Ray, and a killed sweep that
finishes only what is missing."""

import ipaddress
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from flatformer.evaluate import evaluate_run
from flatformer.runs import load_run
from flatformer.sweep import (
    connect_ray,
    expand,
    load_sweep,
    read_results,
    run_job,
    run_sweep,
    summarize,
)

# 2 "tasks" (the rule on two data sets) x 2 recipes x 16 seeds, short runs to keep it fast.
SWEEP = """
tasks = ["plus-last-even"]
recipes = ["paper", "default"]
seeds = "0-15"
sets = [{}, {data_seed = 1}]
[set]
steps = 300
candidates = 1
"""
JOBS = [
    "plus-last-even.paper-2d.paper",
    "plus-last-even.paper-2d.paper.data_seed=1",
    "plus-last-even.paper-2d.default",
    "plus-last-even.paper-2d.default.data_seed=1",
]


def without_time(rows):
    return [{k: v for k, v in r.items() if k not in ("job_seconds", "seconds")} for r in rows]


def sweep(path, out, **kwargs):
    """run_sweep, also returning each job's status."""
    statuses = {}
    rows, failed = run_sweep(
        path,
        out,
        progress=lambda job, result, status: statuses.__setitem__(job["name"], status),
        **kwargs,
    )
    assert failed == []
    return rows, statuses


@pytest.fixture(scope="session")
def sweep_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "s.toml"
    path.write_text(SWEEP)
    return path


@pytest.fixture(scope="session")
def local_sweep(sweep_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "sweep"
    rows, statuses = sweep(sweep_file, out, workers=2)
    assert statuses == {name: "trained" for name in JOBS}
    return out, rows


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray instance for the session (started as `--ray auto` starts it)."""
    ray = connect_ray("auto", 2)
    yield ray
    ray.shutdown()


def test_rows_are_the_run_folders_final_numbers(local_sweep):
    out, rows = local_sweep
    assert [(r["job"], r["seed"]) for r in rows] == [(j, s) for j in JOBS for s in range(16)]
    assert read_results(out / "results.csv") == rows
    for row in rows:
        run = load_run(out / row["job"] / f"seed_{row['seed']}")
        assert run.config["seed"] == row["seed"] and run.config["recipe_name"] == row["recipe"]
        assert run.config["data_seed"] == (1 if "data_seed=1" in row["job"] else 0)
        assert run.steps[-1] == row["steps"] == 300
        final = run.metrics[-1]
        assert [final[k] for k in ("train_loss", "val_loss", "rule_error")] == [
            row[k] for k in ("train_loss", "val_loss", "rule_error")
        ]
    # Oracle: evaluate the final checkpoints again, one model at a time.
    for row in rows[::15]:
        again = evaluate_run(out / row["job"] / f"seed_{row['seed']}")
        assert again["loss"] == pytest.approx(row["val_loss"], rel=1e-12)
        assert again["rule_error"] == row["rule_error"]
    # The two data sets really differ: the same seed ends at a different held-out loss.
    assert rows[0]["val_loss"] != rows[16]["val_loss"]


def test_summary_counts_and_medians(local_sweep):
    _, rows = local_sweep
    summary = summarize(rows)
    assert [s["job"] for s in summary] == JOBS
    for s, name in zip(summary, JOBS):
        errors = np.array([r["rule_error"] for r in rows if r["job"] == name])
        assert s["seeds"] == 16 and s["learned"] == int((errors <= 0.01).sum())
        assert s["median_rule_error"] == np.median(errors) and s["worst_rule_error"] == errors.max()


def test_rerun_skips_finished_jobs(local_sweep, sweep_file):
    out, rows = local_sweep
    marks = {name: (out / name / "done.json").stat().st_mtime_ns for name in JOBS}
    again, statuses = sweep(sweep_file, out, workers=2)
    assert statuses == {name: "skipped" for name in JOBS}
    assert again == rows
    assert marks == {name: (out / name / "done.json").stat().st_mtime_ns for name in JOBS}


def listening_addresses(root: int) -> list:
    """Addresses of the TCP sockets listening in process `root` and its descendants (Linux)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    inodes = set()
    for pid in tree:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    addresses = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                # The kernel prints each 32-bit word in host (little-endian) order.
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                addresses.append(ipaddress.ip_address(raw))
    return addresses


def test_ray_gives_the_same_rows_and_listens_on_loopback_only(
    local_ray, local_sweep, sweep_file, tmp_path
):
    _, local_rows = local_sweep
    rows, statuses = sweep(sweep_file, tmp_path / "ray", ray="auto")
    addresses = listening_addresses(os.getpid())
    assert addresses  # Ray's servers were found, so the next line checks something
    assert all(
        a.is_loopback or getattr(a, "ipv4_mapped", None) and a.ipv4_mapped.is_loopback
        for a in addresses
    ), addresses
    assert statuses == {name: "trained" for name in JOBS}
    assert without_time(rows) == without_time(local_rows)
    assert without_time(read_results(tmp_path / "ray" / "results.csv")) == without_time(local_rows)


def alive(pid: int) -> bool:
    try:  # a zombie (state Z) has exited; it only waits to be reaped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> set:
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
        except (ValueError, OSError):
            continue
    return found


def test_killed_sweep_finishes_only_the_missing_jobs(local_sweep, sweep_file, tmp_path):
    out = tmp_path / "killed"
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flatformer",
            "sweep",
            str(sweep_file),
            "--out",
            str(out),
            "--workers",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not list(out.glob("*/done.json")):
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    workers = children(driver.pid)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # The pool's workers notice the driver is gone and stop writing.
    while any(alive(p) for p in workers):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done_before = {p.parent.name for p in out.glob("*/done.json")}
    assert 1 <= len(done_before) < len(JOBS)
    rows, statuses = sweep(sweep_file, out, workers=2)
    assert statuses == {name: "skipped" if name in done_before else "trained" for name in JOBS}
    _, local_rows = local_sweep
    assert without_time(rows) == without_time(local_rows)
    assert without_time(summarize(rows)) == without_time(summarize(local_rows))


def test_a_partly_trained_job_is_resumed_not_restarted(tmp_path):
    path = tmp_path / "one.toml"
    # The default recipe's 8 candidates per seed: the resumed job has a selection behind it.
    path.write_text(
        'tasks = ["plus-last-even"]\nrecipes = ["default"]\nseeds = "3-5"\n'
        "[set]\nsteps = 300\nselect_step = 200\n"
    )
    rows, _ = sweep(path, tmp_path / "out", workers=1)
    job = tmp_path / "out" / "plus-last-even.paper-2d.default"
    # What a kill after step 200's checkpoints leaves: no done.json, no later checkpoints.
    (job / "done.json").unlink()
    for seed in (3, 4, 5):
        (job / f"seed_{seed}" / "checkpoints" / "step_000300.safetensors").unlink()
    kept = (job / "seed_4" / "checkpoints" / "step_000200.safetensors").stat().st_mtime_ns
    again, statuses = sweep(path, tmp_path / "out", workers=1)
    assert statuses == {job.name: "trained"}
    assert without_time(again) == without_time(rows)
    assert (job / "seed_4" / "checkpoints" / "step_000200.safetensors").stat().st_mtime_ns == kept


def test_a_node_that_cannot_see_the_sweep_folder_refuses_the_job(sweep_file, tmp_path):
    # What a Ray worker on a node without the shared filesystem finds: no sweep.json.
    job = expand(load_sweep(sweep_file), tmp_path / "elsewhere")[0]
    result = run_job(job)
    assert "not visible on this node" in result["error"]
    assert not (tmp_path / "elsewhere").exists()


def test_a_ray_worker_killed_mid_job_is_retried_to_the_same_rows(
    local_ray, local_sweep, sweep_file, tmp_path
):
    from flatformer.store.lock import holder

    out, outcome = tmp_path / "ray-killed", {}
    driver = threading.Thread(
        target=lambda: outcome.update(result=sweep(sweep_file, out, ray="auto"))
    )
    driver.start()
    deadline, killed = time.monotonic() + 120, None
    while killed is None:
        assert driver.is_alive() and time.monotonic() < deadline, "no job was caught mid-run"
        for job in out.glob("*/seed_0"):
            # Mid-job: its first checkpoint after step 0 is written, its last is not.
            pid = holder(job)
            if (
                pid
                and (job / "checkpoints/step_000100.safetensors").exists()
                and not (job.parent / "seed_15/checkpoints/step_000300.safetensors").exists()
            ):
                os.kill(pid, signal.SIGKILL)  # the Ray worker training this job
                killed = job.parent.name
                break
        time.sleep(0.002)
    driver.join(timeout=180)
    rows, statuses = outcome["result"]
    assert statuses == {name: "trained" for name in JOBS}
    assert holder(out / killed / "seed_0") != pid  # another worker finished the job
    _, local_rows = local_sweep
    assert without_time(rows) == without_time(local_rows)


def test_the_papers_knobs_are_sweep_keys(tmp_path):
    """Zhong et al.'s grid: attention rate, width, heads, layers, weight decay, training
    fraction and p are each a key of a sweep's `sets` (the task's settings among them)."""
    from flatformer.sweep.plan import _build

    sweep = {
        "tasks": ["modular-addition"],
        "recipes": ["grokking"],
        "seeds": "0-1",
        "set": {"p": 13, "train_fraction": 0.8, "weight_decay": 2.0, "steps": 10},
        "sets": [
            {"attn_coeff": 0},
            {"attn_coeff": 0.5, "d_model": 32, "d_head": 8, "d_mlp": 128, "n_layers": 4},
        ],
    }
    jobs = expand(sweep, tmp_path)
    assert [j["name"].split(".", 3)[3] for j in jobs] == [
        "attn_coeff=0",
        "attn_coeff=0.5,d_head=8,d_mlp=128,d_model=32,n_layers=4",
    ]
    built = [_build(j)[0] for j in jobs]
    assert [b.cfg.attn_coeff for b in built] == [0.0, 0.5]
    assert (built[1].cfg.d_model, built[1].cfg.n_layers, built[1].cfg.n_heads) == (32, 4, 4)
    assert built[0].task.p == 13 and built[0].task.train_fraction == 0.8
    assert built[0].recipe.weight_decay == 2.0
