"""The command line: useful output, and bad input answered by one line and a non-zero exit."""

import json
import pickle
import shutil

import numpy as np
import pytest
import typer
from clitools import assert_one_line_error, cli


def test_eval_json_reports_the_final_rule_error(paper_run):
    result = cli("eval", paper_run, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["step"] == 20000
    assert report["rule_error"] <= 0.01
    assert 0 < report["loss"] < 2.5
    assert json.loads(cli("eval", paper_run, "--step", 0, "--json").stdout)["rule_error"] > 0.5


def test_tasks_lists_the_paper_task():
    result = cli("tasks")
    assert result.returncode == 0 and "plus-last-even" in result.stdout


def test_gradcheck_passes_for_every_preset():
    for preset, vocab in [("paper-2d", 12), ("simulator-16d", 28), ("paper-2d-2layer", 12)]:
        result = cli("gradcheck", "--preset", preset, "--vocab", vocab)
        assert result.returncode == 0, result.stderr
        verdict = result.stdout.strip().splitlines()[-1]
        assert verdict.startswith("PASS: ") and verdict.endswith("<= threshold 1e-06"), verdict
        worst = float(verdict.split("worst relative error ")[1].split()[0])
        assert worst < 1e-6


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "no-such-task"], ["unknown task", "no-such-task"]),
        (["train", "plus-last-even", "--preset", "huge"], ["unknown preset", "huge"]),
        (["train", "plus-last-even", "--set", "colour=red"], ["unknown key", "colour"]),
        (["train", "plus-last-even", "--set", "lr"], ["key=value"]),
        (["train", "plus-last-even", "--set", "d_model=3"], ["n_heads * d_head"]),
        (["train", "plus-last-even", "--set", "steps=0"], ["steps"]),
        (["train", "plus-last-even", "--seeds", "9-2"], ["--seeds"]),
        (["eval", "no/such/run"], ["not a flatformer run"]),
    ],
)
def test_bad_input_gets_one_line(tmp_path, args, words):
    assert_one_line_error(
        cli(*args, "--out", tmp_path / "x") if args[0] == "train" else cli(*args), *words
    )


@pytest.fixture
def run_copy(paper_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(paper_run, copy)
    return copy


def test_a_missing_checkpoint_is_named(run_copy):
    assert_one_line_error(cli("eval", run_copy, "--step", 12345), "no checkpoint at step 12345")


def test_a_truncated_checkpoint_is_refused(run_copy):
    path = run_copy / "checkpoints/step_020000.safetensors"
    path.write_bytes(path.read_bytes()[:300])
    assert_one_line_error(cli("eval", run_copy), "step_020000", "truncated or corrupt")


def test_a_pickle_in_place_of_a_checkpoint_is_never_unpickled(run_copy, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = run_copy / "checkpoints/step_020000.safetensors"
    path.write_bytes(pickle.dumps({"embed.W_E": Payload()}))
    assert_one_line_error(cli("eval", run_copy), "step_020000")
    assert not marker.exists()


def test_nan_weights_in_a_checkpoint_are_refused(run_copy):
    from safetensors.numpy import load_file, save_file

    path = run_copy / "checkpoints/step_020000.safetensors"
    tensors = load_file(path)
    tensors["embed.W_E"] = np.full_like(tensors["embed.W_E"], np.nan)
    save_file(tensors, path)
    assert_one_line_error(cli("eval", run_copy), "not finite")


@pytest.mark.parametrize("raised", [KeyboardInterrupt, typer.Abort])
def test_an_interrupt_is_said_in_one_line(monkeypatch, capsys, raised):
    from flatformer.commands import cli as cli_module

    def interrupted(**kwargs):
        raise raised()

    monkeypatch.setattr(cli_module, "app", interrupted)
    with pytest.raises(SystemExit) as exit_:
        cli_module.main(["tasks"])
    assert exit_.value.code == 130
    assert "flatformer: interrupted" in capsys.readouterr().err
