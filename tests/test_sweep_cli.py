"""`flatformer sweep` on the command line: a summary table, and bad input answered in one line."""

import json

import pytest

from flatformer.errors import FlatformerError
from flatformer.sweep import expand, load_sweep, read_results
from clitools import assert_one_line_error, cli

GOOD = """
tasks = ["plus-last-even"]
recipes = ["default"]
seeds = "0-1"
sets = [{}, {d_mlp = 8}]
[set]
steps = 100
candidates = 1
"""


def test_sweep_prints_a_summary_and_reruns_nothing(tmp_path):
    (tmp_path / "s.toml").write_text(GOOD)
    first = cli("sweep", tmp_path / "s.toml", "--out", tmp_path / "out", "--workers", "1")
    assert first.returncode == 0, first.stderr
    rows = read_results(tmp_path / "out" / "results.csv")
    assert len(rows) == 4
    lines = [line for line in first.stdout.splitlines() if "paper-2d" in line]
    assert len(lines) == 2
    for line in lines:
        job = "plus-last-even.paper-2d.default" + (".d_mlp=8" if "d_mlp=8" in line else "")
        learned = sum(r["rule_error"] <= 0.01 for r in rows if r["job"] == job)
        assert f"{learned}/2" in line
    assert "every job: candidates=1 steps=100" in " ".join(first.stdout.split())
    assert "2 trained now, 0 finished before" in first.stdout
    again = cli("sweep", tmp_path / "s.toml", "--out", tmp_path / "out")
    assert again.returncode == 0 and "0 trained now, 2 finished before" in again.stdout
    assert read_results(tmp_path / "out" / "results.csv") == rows


@pytest.mark.parametrize(
    "text, words",
    [
        ("tasks = [", ["not valid TOML"]),
        (
            'tasks = ["plus-last-even"]\nrecipes = ["default"]\nseeds = "0-1"\nseed = 3',
            ["unknown key 'seed'"],
        ),
        ('tasks = ["no-such-task"]\nrecipes = ["default"]\nseeds = "0-1"', ["unknown task"]),
        ('tasks = ["plus-last-even"]\nrecipes = ["nope"]\nseeds = "0-1"', ["unknown recipe"]),
        (
            'tasks = ["plus-last-even"]\nrecipes = ["default"]\nseeds = "0-1"\nsets = [{lr2 = 1}]',
            ["plus-last-even.paper-2d.default.lr2=1", "unknown key 'lr2'"],
        ),
        ('tasks = ["plus-last-even"]\nrecipes = ["default"]\nseeds = "3-1"', ["seeds must be"]),
        ('tasks = ["plus-last-even"]\nrecipes = ["default"]', ["needs tasks, recipes and seeds"]),
        (
            'tasks = ["plus-last-even"]\nrecipes = ["default"]\nseeds = "0-1"\nsets = [{}, {}]',
            ["repeated"],
        ),
    ],
)
def test_bad_sweep_files_are_refused_before_anything_runs(tmp_path, text, words):
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(FlatformerError) as info:
        expand(load_sweep(tmp_path / "s.toml"), tmp_path / "out")
    for word in words:
        assert word in str(info.value)
    assert not (tmp_path / "out").exists()


def test_bad_sweep_files_get_one_line(tmp_path):
    (tmp_path / "s.toml").write_text("tasks = [")
    assert_one_line_error(cli("sweep", tmp_path / "s.toml"), "not valid TOML")
    (tmp_path / "s.toml").write_text('tasks = ["nope"]\nrecipes = ["default"]\nseeds = "0-1"')
    assert_one_line_error(cli("sweep", tmp_path / "s.toml"), "unknown task 'nope'")


def test_bad_options_get_one_line(tmp_path):
    (tmp_path / "s.toml").write_text(GOOD)
    assert_one_line_error(cli("sweep", tmp_path / "missing.toml"), "does not exist")
    base = ["sweep", tmp_path / "s.toml", "--out", tmp_path / "out"]
    assert_one_line_error(cli(*base, "--workers", "0"), "--workers must be a whole number in 1..")
    assert_one_line_error(cli(*base, "--ray", "nohost"), "HOST:PORT")
    assert_one_line_error(cli(*base, "--ray", "127.0.0.1:1"), "cannot reach a Ray head")
    assert not list((tmp_path / "out").glob("*/seed_*"))  # nothing was trained


def test_a_failing_job_does_not_stop_the_others(tmp_path):
    (tmp_path / "s.toml").write_text(GOOD)
    # A folder left by another run where one job wants to write: that job fails, alone.
    taken = tmp_path / "out" / "plus-last-even.paper-2d.default.d_mlp=8" / "seed_1"
    taken.mkdir(parents=True)
    (taken / "config.json").write_text(json.dumps({"task": "something else"}))
    result = cli("sweep", tmp_path / "s.toml", "--out", tmp_path / "out", "--workers", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("flatformer: error: 1 of 2 jobs failed") and "different run" in last
    rows = read_results(tmp_path / "out" / "results.csv")
    assert {r["job"] for r in rows} == {"plus-last-even.paper-2d.default"}


def test_a_folder_finished_by_a_different_job_is_refused(tmp_path):
    (tmp_path / "s.toml").write_text(GOOD)
    assert cli("sweep", tmp_path / "s.toml", "--out", tmp_path / "out").returncode == 0
    (tmp_path / "s.toml").write_text(GOOD.replace("steps = 100", "steps = 200"))
    assert_one_line_error(
        cli("sweep", tmp_path / "s.toml", "--out", tmp_path / "out"), "holds a different job"
    )
