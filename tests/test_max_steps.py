"""FLATFORMER_MAX_STEPS caps every training job (the docs test runs the README with it)."""

import pytest
from clitools import assert_one_line_error, cli

from flatformer.errors import FlatformerError
from flatformer.training.jobs import build_job, capped_note
from flatformer.store.runs import load_run
from flatformer.training.trainer import train


def test_the_cap_shortens_the_recipe_and_candidates_are_still_chosen(tmp_path, monkeypatch):
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", "200")
    job, _ = build_job("plus-last-even", None, "default", 0, "0-1", tmp_path / "many", [])
    assert job.recipe.steps == 200 and job.capped_from == 20_000
    assert job.recipe.candidates == 8 and job.recipe.select_step == 100
    assert "200 steps" in capped_note(job) and "20000" in capped_note(job)
    trainer = train(job)
    assert len(trainer.members) == 2  # one chosen candidate per seed
    run = load_run(tmp_path / "many" / "seed_1")
    assert run.steps == [0, 100, 200]
    assert run.metrics[-1]["step"] == 200


def test_runs_shorter_than_the_cap_and_explicit_selection_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", "200")
    job, _ = build_job("plus-last-even", None, "paper", 0, None, tmp_path, ["steps=100"])
    assert job.recipe.steps == 100 and job.capped_from is None and capped_note(job) is None
    # A selection step the cap makes impossible is replaced by the short-run choice.
    job, _ = build_job("plus-last-even", None, "default", 0, None, tmp_path, ["select_step=1000"])
    assert job.recipe.steps == 200 and job.recipe.select_step == 100
    monkeypatch.delenv("FLATFORMER_MAX_STEPS")
    job, _ = build_job("plus-last-even", None, "default", 0, None, tmp_path, [])
    assert job.recipe.steps == 20_000 and job.capped_from is None


@pytest.mark.parametrize("value", ["x", "0", "-5", "1.5"])
def test_a_bad_cap_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", value)
    with pytest.raises(FlatformerError, match="FLATFORMER_MAX_STEPS"):
        build_job("plus-last-even", None, "default", 0, None, tmp_path, [])


def test_the_command_says_the_run_was_capped(tmp_path, monkeypatch):
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", "100")
    result = cli("train", "plus-last-even", "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].startswith("note: FLATFORMER_MAX_STEPS=100 caps")
    assert "step 100," in result.stdout
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", "many")
    assert_one_line_error(
        cli("train", "plus-last-even", "--out", tmp_path / "other"), "FLATFORMER_MAX_STEPS"
    )
