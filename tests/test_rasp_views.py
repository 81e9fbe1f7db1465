"""A compiled run in `eval`, `analyze`, `figures` and `geometry`: measured on its held-out
inputs against the program's own values, position by position."""

import itertools
import json
import shutil

import numpy as np
import pytest

from clitools import assert_one_line_error, cli_here

from flatformer import rasp
from flatformer.store.checkpoints import checkpoint_bytes, read_checkpoint
from flatformer.store.layout import checkpoint_path
from flatformer.store.runs import load_run

REVERSE = """
from flatformer import rasp
length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE))
opp = rasp.SequenceMap(lambda x, y: x - y - 1, length, rasp.indices)
flip = rasp.Select(rasp.indices, opp, rasp.Comparison.EQ)
program = rasp.Aggregate(flip, rasp.tokens).named("reverse")
"""


@pytest.fixture(scope="module")
def reverse(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reverse")
    source = folder / "reverse.py"
    source.write_text(REVERSE)
    made = cli_here(
        "compile", source, "--vocab", "1,2,3", "--max-len", "4", "--out", folder / "run"
    )
    assert made.returncode == 0, made.stderr
    return folder / "run"


def test_the_held_out_set_is_every_full_input_with_the_interpreters_values(reverse):
    run = load_run(reverse)
    data = run.data()
    want_inputs = [[0, *(int(v) for v in xs)] for xs in itertools.product("123", repeat=4)]
    assert data.val_inputs.tolist() == want_inputs
    classes = run.vocab_out
    for row, target, weight in zip(data.val_inputs, data.val_targets, data.val_weights):
        values = [int(run.vocab[t]) for t in row[1:]]
        assert [classes[c] for c in target[1:]] == [str(v) for v in values[::-1]]
        assert weight.tolist() == [0.0] + [1.0] * 4  # BOS has no value
    assert len(data.rule_inputs) == 81 * 4 and data.rule_allowed.shape == (81 * 4, len(classes))


def test_eval_measures_the_model_against_the_program_not_itself(reverse, tmp_path):
    clean = cli_here("eval", reverse, "--json")
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["rule_error"] == 0.0
    # The last head reads the value to copy: with it silenced the model's outputs are no longer
    # the program's, and eval must say so (targets taken from the model would still agree).
    broken = tmp_path / "broken"
    shutil.copytree(reverse, broken)
    tensors, _ = read_checkpoint(checkpoint_path(broken, 0))
    last = f"blocks.{load_run(reverse).cfg.n_layers - 1}.attn.W_O"
    tensors[last] = np.zeros_like(tensors[last])
    checkpoint_path(broken, 0).write_bytes(checkpoint_bytes(tensors))
    damaged = cli_here("eval", broken, "--json")
    assert damaged.returncode == 0, damaged.stderr
    assert json.loads(damaged.stdout)["rule_error"] > 0.3


def test_analyze_figures_and_geometry_open_a_compiled_run(reverse, tmp_path):
    analyzed = cli_here("analyze", reverse, "--json")
    assert analyzed.returncode == 0, analyzed.stderr
    report = json.loads(analyzed.stdout)
    assert report["held_out"]["rule_error"] == 0.0
    only = "fig02,fig03,fig04,fig13,supp_value_arrows"
    drawn = cli_here("figures", reverse, "--out", tmp_path / "fig", "--jobs", "1", "--only", only)
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "fig" / "fig02_training_data.png").is_file()
    assert (tmp_path / "fig" / "supp_value_arrows.png").is_file()
    assert "skipped fig04_generated_sequences: a compiled program's outputs" in drawn.stderr
    assert "skipped fig03_learning_curve: this run was not trained here" in drawn.stderr
    geometry = cli_here("geometry", reverse)
    assert geometry.returncode == 0, geometry.stderr


def test_the_program_rows_figure_shows_the_programs_values(reverse):
    from flatformer.figures import FigureContext
    from flatformer.figures.data import RIGHT, compute_training_data

    rows = compute_training_data(FigureContext(load_run(reverse)), n=3)
    assert rows.tokens[0] == ["BOS", "1\n→ 1", "1\n→ 1", "1\n→ 1", "1\n→ 1"]
    last = rows.tokens[-1]
    assert last[1:] == ["3\n→ 3"] * 4
    assert all((s[1:] == RIGHT).all() for s in rows.status)


def test_a_hand_edited_held_out_set_is_refused_in_one_line(reverse, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(reverse, bad)
    config = json.loads((bad / "config.json").read_text())
    config["imported"]["rasp"]["held_out"]["targets"][0] = [0, 99, 0, 0, 0]
    (bad / "config.json").write_text(json.dumps(config))
    assert_one_line_error(cli_here("eval", bad), "held-out set must be inputs and class ids")


def test_the_interpreter_agrees_with_the_recorded_values():
    """The recorded values are the interpreter's own (`rasp.evaluate`), not the model's."""
    from flatformer.rasp.compile import compile_rasp_to_model
    from flatformer.rasp.run import held_out_set

    length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE))
    compiled = compile_rasp_to_model(length, [1, 2], 3)
    held = held_out_set(length, compiled)
    assert held["exhaustive"] and len(held["inputs"]) == 8
    assert {tuple(compiled.classes[c] for c in row[1:]) for row in held["targets"]} == {(3, 3, 3)}
