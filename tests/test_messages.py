"""Messages that say what to do: a near miss names the intended word (and that word is
accepted), a prompt typed without spaces shows the split it meant, a checkpoint file given for
its run names the folder, and tables fit 80 columns."""

import os
import re
import subprocess
import sys

import pytest
import torch
from clitools import assert_one_line_error, cli_here

from flatformer.config import preset
from flatformer.errors import closest, did_you_mean
from flatformer.tasks import TASKS, get_task
from flatformer.tasks.base import split_word
from flatformer.training.trainer import get_recipe

torch.set_num_threads(1)


def suggested(result) -> str:
    match = re.search(r"did you mean (\S+?)\?", result.stderr)
    assert match, result.stderr
    return match.group(1).strip('"')


def test_closest_reads_underscores_and_typos():
    assert closest("plus_last_even", TASKS) == "plus-last-even"
    assert closest("PLUS-LAST-EVEN", TASKS) == "plus-last-even"
    assert closest("plus-last-evn", TASKS) == "plus-last-even"
    assert closest("zzzz", TASKS) is None and did_you_mean("zzzz", TASKS) == ""


@pytest.mark.parametrize("typed", ["plus-last-evn", "plus_last_even", "Plus-Last-Even"])
def test_a_mistyped_task_names_the_task_and_that_name_trains(typed):
    result = cli_here("train", typed, "--steps", "1")
    assert_one_line_error(result, "did you mean plus-last-even?")
    get_task(suggested(result))  # accepted


def test_mistyped_preset_recipe_set_and_command_name_accepted_words(tmp_path):
    result = cli_here("train", "plus-last-even", "--preset", "paper2d", "--steps", "1")
    assert_one_line_error(result, "did you mean paper-2d?")
    preset(suggested(result), 12)
    result = cli_here("train", "plus-last-even", "--recipe", "grokkin", "--steps", "1")
    assert_one_line_error(result, "did you mean grokking?")
    get_recipe(suggested(result))
    result = cli_here("train", "plus-last-even", "--set", "lrr=1e-3", "--steps", "1")
    assert_one_line_error(result, "did you mean lr?")
    result = cli_here("train", "plus-last-even", "--set", "d_mpl=8", "--steps", "1")
    assert_one_line_error(result, "did you mean d_mlp?")
    result = cli_here("trian", "plus-last-even")
    assert_one_line_error(result, "train")


def test_split_word_finds_the_spaces_left_out():
    vocab = get_task("plus-last-even").vocab
    assert split_word("41+46+", vocab) == ["4", "1", "+", "4", "6", "+"]
    assert split_word("10+", vocab) == ["10", "+"]
    assert split_word("4x", vocab) is None


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("messages") / "run"
    result = cli_here("train", "plus-last-even", "--steps", "1", "--engine", "numpy", "--out", run)
    assert result.returncode == 0, result.stderr
    return run


def test_a_prompt_without_spaces_shows_the_split_and_the_split_runs(one_step_run):
    result = cli_here("generate", one_step_run, "--prompt", "41+46+", "-n", "2")
    assert_one_line_error(result, "separated by spaces", '"4 1 + 4 6 +"')
    match = re.search(r'did you mean "([^"]+)"', result.stderr)
    again = cli_here("generate", one_step_run, "--prompt", match.group(1), "-n", "2")
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0] == "prompt     4 1 + 4 6 +" and lines[1].startswith("generated  ")
    assert len(lines[1].split()) == 1 + 2


def test_a_checkpoint_file_names_its_run_folder(one_step_run):
    file = one_step_run / "checkpoints" / "step_000001.safetensors"
    assert file.is_file()
    result = cli_here("eval", file)
    assert_one_line_error(result, f"pass its run folder, {one_step_run}", "--step 1")
    assert cli_here("eval", one_step_run, "--step", "1").returncode == 0  # the hint works
    assert_one_line_error(cli_here("eval", file.parent), f"pass its run folder, {one_step_run}")


def test_tasks_fit_80_columns_without_cutting_a_name():
    env = {**os.environ, "COLUMNS": "80"}
    result = subprocess.run(
        [sys.executable, "-m", "flatformer", "tasks"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in result.stdout
    names = {line.split()[0] for line in lines if line.strip()}
    assert set(TASKS) <= names
