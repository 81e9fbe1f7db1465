"""`flatformer compare` over a --seeds run: tables, summary.json, figures, one-line errors."""

import json

import numpy as np
import pytest
from conftest import make_run
from typer.testing import CliRunner

from flatformer.commands.app import app
from flatformer.commands.cli import load_commands
from flatformer.compare import aligned_landscapes, compare_runs, summary
from flatformer.compare.figures import (
    draw_embedding_grid,
    draw_invariants,
    draw_landscape_grid,
    draw_rule_errors,
    structure_matrix,
)
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate_run
from clitools import assert_one_line_error, cli


def invoke(*args):
    """The command in this process (a subprocess spends seconds importing matplotlib)."""
    load_commands()
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def seeds_run(tmp_path_factory):
    """Four seeds that learn the task in 2,000 steps (a high learning rate, one candidate)."""
    return make_run(
        tmp_path_factory.mktemp("seeds") / "run", seeds="0-3", steps=2000, candidates=1, lr=0.02
    )


@pytest.fixture(scope="module")
def comparison(seeds_run):
    return compare_runs(seeds_run)


def test_compare_command_writes_the_summary_and_figures(seeds_run, tmp_path):
    result = invoke("compare", seeds_run, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Which structures hold in every seed that learned the task" in result.stdout
    assert "Every seed" in result.stdout
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["task"] == "plus-last-even" and report["seeds"] == [0, 1, 2, 3]
    assert report["step"] == 2000
    for name in ("embeddings", "landscapes", "rule_errors", "invariants"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Each seed's rule error is the one `flatformer eval` gives for its folder.
    for row in report["per_seed"]:
        expected = evaluate_run(seeds_run / f"seed_{row['seed']}")["rule_error"]
        assert row["rule_error"] == pytest.approx(expected, abs=1e-12)
        assert row["successful"] == (row["rule_error"] <= 0.01)
    # The summary's counts are the per-seed booleans, counted.
    ok = [r for r in report["per_seed"] if r["successful"]]
    bad = [r for r in report["per_seed"] if not r["successful"]]
    assert report["n_successful"] == len(ok) >= 1
    for row in report["summary"]:
        if "order" in row:
            continue
        assert row["successful"] == sum(r[row["key"]] for r in ok)
        assert row["failed"] == sum(r[row["key"]] for r in bad)
        assert row["verdict"] == ("necessary" if row["successful"] == len(ok) else "varies")
    # The reference is aligned to itself.
    ref = report["seeds"].index(report["reference_seed"])
    assert np.allclose(report["per_seed"][ref]["R"], np.eye(2))


def test_json_output_and_reference_choice(seeds_run, tmp_path):
    result = invoke(
        "compare", seeds_run, "--json", "--reference", 2, "--no-figures", "--out", tmp_path
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["reference_seed"] == 2
    assert report["per_seed"][2]["residual"] == pytest.approx(0.0, abs=1e-12)
    assert not list(tmp_path.glob("*.png"))


def test_compare_refuses_bad_input(seeds_run, tmp_path):
    assert_one_line_error(cli("compare", seeds_run / "seed_0"), "--seeds")
    result = invoke("compare", seeds_run, "--success", 2)
    assert isinstance(result.exception, FlatformerError) and "--success" in str(result.exception)
    for kwargs, words in (
        ({"reference": 9}, "reference seed 9"),
        ({"step": 150}, "no checkpoint at step 150"),
    ):
        with pytest.raises(FlatformerError, match=words):
            compare_runs(seeds_run, **kwargs)
    with pytest.raises(FlatformerError, match="no run"):
        compare_runs(tmp_path)


def test_step_option_compares_an_earlier_checkpoint(seeds_run):
    early = compare_runs(seeds_run, step=0)
    assert early.step == 0
    # At initialisation no seed has learned anything.
    assert (early.rule_error > 0.5).all() and not early.successful.any()
    assert all(r["verdict"] == "no seed learned the task" for r in summary(early))


def test_figures_draw_what_was_computed(comparison):
    c = comparison
    S = len(c.seeds)
    fig = draw_embedding_grid(c)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == S
    for s, ax in enumerate(panels):
        assert ax.get_title().startswith(f"seed {c.seeds[s]}")
        offsets = ax.collections[0].get_offsets()
        assert np.allclose(offsets, c.points[s].reshape(-1, 2))
    lands = aligned_landscapes(c, resolution=40)
    fig = draw_landscape_grid(c, lands)
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(images) == S and all(np.array_equal(i, l.argmax) for i, l in zip(images, lands))
    # A landscape pixel is the seed's own model run with z set to the pixel mapped back.
    for s, (i, j) in ((1, (23, 7)), (3, (5, 30))):
        x = np.array([lands[s].xs[j], lands[s].ys[i]]) @ c.R[s].T
        logits = c.models[s]([[0]], {"blocks.0.hook_resid_mid": lambda a, n: x.reshape(a.shape)})
        assert lands[s].argmax[i, j] == logits[0, 0].argmax()
    labels, matrix = structure_matrix(c)
    fig = draw_invariants(c)
    assert np.array_equal(fig.axes[0].images[0].get_array(), matrix.astype(int))
    assert len(fig.axes[0].get_yticklabels()) == len(labels)
    fig = draw_rule_errors(c)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert sum(heights) == S


def test_compare_figures_read_cleanly(comparison):
    """No overprinted label, covered marker or text at the canvas edge (as test_figures_labels
    measures it) in the figures `compare` saves."""
    from test_figures_labels import problems

    c = comparison
    figures = {
        "embedding_grid": draw_embedding_grid(c),
        "landscape_grid": draw_landscape_grid(c, aligned_landscapes(c, resolution=40)),
        "rule_errors": draw_rule_errors(c),
        "invariants": draw_invariants(c),
    }
    assert {name: found[:5] for name, fig in figures.items() if (found := problems(fig))} == {}
