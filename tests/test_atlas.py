"""Atlases: reproducible draws, one measured row per run with the published table's columns,
a rerun and a killed atlas that redo only what is missing, the same table on Ray, and the phase
diagram's numbers and figure."""

import math
import re
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from flatformer.atlas import (
    COLUMNS,
    MECHANISMS,
    PUBLISHED,
    draw_one,
    draw_table,
    expand_atlas,
    load_atlas,
    phase_diagram,
    read_atlas,
    run_atlas,
)
from flatformer.errors import FlatformerError
from flatformer.store.runs import load_run

# A tiny model on p = 7: three drawn learning rates and attention rates x two seeds, each job 40 full-batch steps.
ATLAS = """
tasks = ["modular-addition"]
recipes = ["grokking"]
seeds = "0-1"
[set]
p = 7
d_model = 8
n_heads = 2
d_head = 4
d_mlp = 16
steps = 40
checkpoint_every = 20
eval_every = 20
[draw]
n_runs = 3
seed = 5
lr = {loguniform = [0.001, 0.01]}
attn_coeff = {uniform = [0, 1]}
"""
JOBS = [f"modular-addition.grokking-1l.grokking.draw-{i:04d}" for i in range(3)]


def atlas(path, out, **kwargs):
    statuses = {}
    rows, failed = run_atlas(
        path,
        out,
        progress=lambda job, result, status: statuses.__setitem__(job["name"], status),
        **kwargs,
    )
    assert failed == []
    return rows, statuses


def without_time(rows):
    return [
        {k: v for k, v in r.items() if k not in ("job_seconds", "job_cpu_seconds")} for r in rows
    ]


@pytest.fixture(scope="module")
def atlas_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("atlas") / "tiny.toml"
    path.write_text(ATLAS)
    return path


@pytest.fixture(scope="module")
def local_atlas(atlas_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "atlas"
    rows, statuses = atlas(atlas_file, out, workers=1, explore=1)
    assert statuses == {name: "trained" for name in JOBS}
    return out, rows


# --------------------------------------------------------------------------- draws


def test_a_draw_is_reproducible_and_does_not_change_when_more_are_drawn():
    _, seed, knobs = draw_table(
        {
            "n_runs": 5,
            "seed": 3,
            "attn_coeff": {"uniform": [0, 1]},
            "d_model": {"loguniform": [32, 512], "integer": True},
            "d_mlp": {"times": ["d_model", 4]},
            "n_layers": {"integers": [1, 4]},
            "act_fn": {"choice": ["relu", "gelu"]},
        }
    )
    first = [draw_one(knobs, seed, i) for i in range(50)]
    assert first == [draw_one(knobs, seed, i) for i in range(50)]
    assert first[:5] == [draw_one(knobs, seed, i) for i in range(5)]
    assert first != [draw_one(knobs, seed + 1, i) for i in range(50)]
    for d in first:
        assert 0 <= d["attn_coeff"] <= 1 and isinstance(d["attn_coeff"], float)
        assert 32 <= d["d_model"] < 512 and isinstance(d["d_model"], int)
        assert d["d_mlp"] == 4 * d["d_model"]
        assert d["n_layers"] in (1, 2, 3, 4) and d["act_fn"] in ("relu", "gelu")
    # Spread as drawn: both ends of the integers, both choices, log-uniform widths.
    assert {d["n_layers"] for d in first} == {1, 2, 3, 4}
    assert {d["act_fn"] for d in first} == {"relu", "gelu"}
    below = np.mean([d["d_model"] < 128 for d in first])  # log-uniform: half below sqrt(32*512)
    assert 0.25 < below < 0.75


@pytest.mark.parametrize(
    "table, words",
    [
        ({"seed": 0, "lr": {"uniform": [0, 1]}}, "n_runs"),
        ({"n_runs": 0, "lr": {"uniform": [0, 1]}}, "n_runs"),
        ({"n_runs": 2}, "names no key"),
        ({"n_runs": 2, "lr": 0.1}, "distribution"),
        ({"n_runs": 2, "lr": {"normal": [0, 1]}}, "takes one of"),
        ({"n_runs": 2, "lr": {"uniform": [1, 0]}}, "[low, high]"),
        ({"n_runs": 2, "lr": {"loguniform": [0, 1]}}, "low > 0"),
        ({"n_runs": 2, "lr": {"choice": []}}, "non-empty"),
        ({"n_runs": 2, "d_mlp": {"times": ["d_model", 4]}}, "not drawn"),
    ],
)
def test_bad_draw_tables_get_one_line(table, words):
    with pytest.raises(FlatformerError, match=re.escape(words)):
        draw_table(table)


def test_jobs_are_named_after_their_draw_and_carry_its_values(atlas_file, tmp_path):
    jobs = expand_atlas(load_atlas(atlas_file), tmp_path / "out")
    assert [j["name"] for j in jobs] == JOBS
    _, seed, knobs = draw_table(load_atlas(atlas_file)["draw"])
    for i, job in enumerate(jobs):
        assert job["draw"] == i and job["drawn"] == draw_one(knobs, seed, i)
        assert job["overrides"]["lr"] == job["drawn"]["lr"] and job["overrides"]["p"] == 7
        assert job["folder"] == str((tmp_path / "out" / job["name"]).absolute())
    # Each entry of sets is crossed with each draw.
    crossed = load_atlas(atlas_file)
    crossed["sets"] = [{}, {"weight_decay": 1.0}]
    names = [j["name"] for j in expand_atlas(crossed, tmp_path / "crossed")]
    assert names == JOBS + [
        f"modular-addition.grokking-1l.grokking.weight_decay=1.0.draw-{i:04d}" for i in range(3)
    ]
    # --set pairs join the file's [set]; without [draw] an atlas is its sweep's grid.
    grid = load_atlas(atlas_file, {"weight_decay": 0.5})
    del grid["draw"]
    grid["sets"] = [{"lr": 0.001}, {"lr": 0.003}]
    jobs = expand_atlas(grid, tmp_path / "grid")
    assert [j["name"] for j in jobs] == [
        "modular-addition.grokking-1l.grokking.lr=0.001",
        "modular-addition.grokking-1l.grokking.lr=0.003",
    ]
    assert all(j["overrides"]["weight_decay"] == 0.5 and j["draw"] is None for j in jobs)


def test_draws_plans_the_first_draws_unchanged(atlas_file, tmp_path):
    from flatformer.atlas.driver import plan_atlas

    first = plan_atlas(atlas_file, tmp_path / "out", draws=2)
    assert [j["name"] for j in first] == JOBS[:2]
    more = plan_atlas(atlas_file, tmp_path / "out", draws=5)
    assert [j["drawn"] for j in more[:3]] == [j["drawn"] for j in plan_atlas(atlas_file, tmp_path)]
    assert len(more) == 5
    with pytest.raises(FlatformerError, match="--draws must be"):
        plan_atlas(atlas_file, tmp_path / "out", draws=0)


def test_a_knob_both_drawn_and_set_is_refused(atlas_file, tmp_path):
    sweep = load_atlas(atlas_file)
    sweep["sets"] = [{"lr": 0.1}]
    with pytest.raises(FlatformerError, match="both drawn and set"):
        expand_atlas(sweep, tmp_path)


# --------------------------------------------------------------------------- runs and measures


def test_one_row_per_run_with_the_published_columns(local_atlas):
    out, rows = local_atlas
    assert [(r["job"], r["seed"]) for r in rows] == [(j, s) for j in JOBS for s in (0, 1)]
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == COLUMNS
    assert {"gradient_sim", "distance_irrelevance", "circularity"} <= set(header)
    again = read_atlas(out / "results.csv")
    assert [r["job"] for r in again] == [r["job"] for r in rows]
    for row in again:
        run = load_run(out / row["job"] / f"seed_{row['seed']}")
        assert row["lr"] == run.config["recipe"]["lr"] and row["p"] == 7
        assert row["d_model"] == 8 and row["attn_coeff"] == run.config["model"]["attn_coeff"]
        assert f"attn_coeff={row['attn_coeff']!r}" in row["overrides"].split()
        # Oracles: the held-out accuracy is one minus the training loop's rule error (the same
        # pairs, another code path); the norm is the checkpoint's, summed here in float64.
        assert row["validation_accuracy"] == pytest.approx(1 - row["rule_error"], abs=1e-12)
        weights = run.weights()
        norm = math.sqrt(sum((w.astype(np.float64) ** 2).sum() for w in weights.values()))
        assert row["parameter_norm"] == pytest.approx(norm, rel=1e-12)
        assert row["mechanism"] in MECHANISMS and 0 < row["job_cpu_seconds"] < 600
        assert all(isinstance(row[k], float) for k in PUBLISHED)
        assert [int(k) for k in str(row["key_frequencies"]).split()] and 0 < row["key_share"] <= 1
        assert (out / row["job"] / f"seed_{row['seed']}" / "explorer.html").is_file()


def test_rerun_skips_measured_jobs(local_atlas, atlas_file):
    out, rows = local_atlas
    marks = {name: (out / name / "measures.json").stat().st_mtime_ns for name in JOBS}
    again, statuses = atlas(atlas_file, out, workers=1)
    assert statuses == {name: "skipped" for name in JOBS}
    assert again == rows
    assert marks == {name: (out / name / "measures.json").stat().st_mtime_ns for name in JOBS}


def test_a_trained_but_unmeasured_job_is_measured_not_retrained(local_atlas, atlas_file, tmp_path):
    out, rows = local_atlas
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / JOBS[1] / "measures.json").unlink()  # a kill between training and measuring
    kept = (copy / JOBS[1] / "done.json").stat().st_mtime_ns
    again, statuses = atlas(atlas_file, copy, workers=1)
    assert (
        statuses[JOBS[1]] == "trained" and (copy / JOBS[1] / "done.json").stat().st_mtime_ns == kept
    )
    assert without_time(again) == without_time(rows)


def test_killed_atlas_finishes_only_the_missing_jobs(local_atlas, atlas_file, tmp_path):
    out = tmp_path / "killed"
    driver = subprocess.Popen(
        [sys.executable, "-m", "flatformer", "atlas", atlas_file, "--out", out, "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while not list(out.glob("*/measures.json")):
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    measured_before = {p.parent.name for p in out.glob("*/measures.json")}
    assert 1 <= len(measured_before) < len(JOBS)
    marks = {name: (out / name / "measures.json").stat().st_mtime_ns for name in measured_before}
    rows, statuses = atlas(atlas_file, out, workers=1)
    assert statuses == {n: "skipped" if n in measured_before else "trained" for n in JOBS}
    assert marks == {name: (out / name / "measures.json").stat().st_mtime_ns for name in marks}
    _, local_rows = local_atlas
    assert without_time(rows) == without_time(local_rows)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance of two workers (as `--ray auto` starts it), or the one already
    running in this test session."""
    import ray

    from flatformer.sweep import connect_ray

    if ray.is_initialized():
        yield ray
        return
    connect_ray("auto", 2)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_table(local_ray, local_atlas, atlas_file, tmp_path):
    rows, statuses = atlas(atlas_file, tmp_path / "ray", ray="auto", workers=2, explore=1)
    assert statuses == {name: "trained" for name in JOBS}
    _, local_rows = local_atlas
    assert without_time(rows) == without_time(local_rows)


# --------------------------------------------------------------------------- the phase diagram


def synthetic_rows():
    """Runs whose mechanism is set by hand: attn_coeff below 0.5 pizza, above clock, one
    "other" at 0.95 and one run with no mechanism (another task)."""
    rows = []
    for i, a in enumerate(np.linspace(0.01, 0.99, 20)):
        for width in (32, 128):
            kind = "pizza" if a < 0.5 else "clock"
            rows.append(
                {
                    "job": f"j{i}",
                    "seed": width,
                    "attn_coeff": float(a),
                    "d_model": width,
                    "mechanism": kind,
                }
            )
    rows.append({"job": "x", "seed": 0, "attn_coeff": 0.95, "d_model": 32, "mechanism": "other"})
    rows.append({"job": "y", "seed": 0, "attn_coeff": 0.5, "d_model": 32, "mechanism": None})
    return rows


def test_cells_count_each_mechanism():
    diagram = phase_diagram(synthetic_rows(), "attn_coeff", "d_model", bins=4)
    assert diagram["y_labels"] == ["32", "128"] and len(diagram["x_labels"]) == 4
    assert diagram["left_out"] == 1
    counts = diagram["counts"]  # (y, x, kinds)
    clock, pizza, other = (MECHANISMS.index(k) for k in ("clock", "pizza", "other"))
    # Oracle: count by hand, bin by bin (width 0.25 over [0, 1]).
    for yi, width in enumerate((32, 128)):
        for xi in range(4):
            inside = [
                r
                for r in synthetic_rows()
                if r["d_model"] == width
                and r["mechanism"]
                and xi / 4 <= r["attn_coeff"] < (xi + 1) / 4
            ]
            for kind, k in (("clock", clock), ("pizza", pizza), ("other", other)):
                assert counts[yi, xi, k] == sum(r["mechanism"] == kind for r in inside)
    assert counts[:, :2, clock].sum() == 0 and counts[:, 2:, pizza].sum() == 0
    assert np.allclose(diagram["fraction"].sum(-1), 1)
    assert sum(len(c) for row in diagram["runs"] for c in row) == diagram["total"].sum() == 41
    one = phase_diagram(synthetic_rows(), bins=10)
    assert one["y_labels"] == ["all"] and one["counts"].shape == (1, 10, 3)


def test_a_diagram_without_measured_runs_is_refused():
    with pytest.raises(FlatformerError, match="no run"):
        phase_diagram([{"attn_coeff": 0.5, "mechanism": None}])
    with pytest.raises(FlatformerError, match="not a number"):
        phase_diagram([{"attn_coeff": "x", "mechanism": "clock"}])


def test_the_figure_draws_a_panel_per_mechanism_with_readable_cells():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flatformer.figures.atlas import draw_phase_diagram

    diagram = phase_diagram(synthetic_rows(), "attn_coeff", "d_model", bins=4)
    fig = draw_phase_diagram(diagram)
    try:
        panels = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title() for ax in panels] == [f"fraction {k}" for k in MECHANISMS]
        texts = [t.get_text() for t in panels[0].texts]
        assert len(texts) == int((diagram["total"] > 0).sum()) and "100%\nn=5" in texts
        assert (
            panels[0].get_xlabel().startswith("attn_coeff") and panels[0].get_ylabel() == "d_model"
        )
        assert [t.get_text() for t in panels[0].get_xticklabels()] == diagram["x_labels"]
    finally:
        plt.close(fig)
