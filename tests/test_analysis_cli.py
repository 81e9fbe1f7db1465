"""`flatformer analyze` and `flatformer generate` end to end."""

import json

import numpy as np
import pytest

from flatformer.analysis.circuits import circuit_table
from flatformer.training.evaluate import evaluate_run
from flatformer.store.runs import load_run
from clitools import assert_one_line_error, cli


@pytest.fixture(scope="module")
def paper_report(paper_run):
    result = cli("analyze", paper_run, "--json", "--patch", "4 1 + 4 6 9 5 +", "4 1 + 4 8 9 5 +")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_analyze_reports_the_five_steps_and_knobs_on_the_paper_model(paper_report, paper_run):
    rows = {r["measure"]: r["value"] for r in paper_report["algorithm"]}
    retrieve = next(v for m, v in rows.items() if "most recent even" in m)
    nudge = rows["z lands in the target's zone"]
    error = evaluate_run(paper_run)["rule_error"]
    assert retrieve >= 0.99 and nudge >= 0.99
    assert paper_report["held_out"]["rule_error"] == pytest.approx(error)
    assert nudge == pytest.approx(1 - error, abs=1e-12)
    knobs = {k["name"]: k for k in paper_report["knobs"]}
    for name in (
        "head 0.0 zero",
        "head 0.0 mean",
        "mlp 0 off",
        "positions off",
        "beta 0",
        "beta 0.5",
        "beta 2",
        "beta 3",
    ):
        kl = np.array(knobs[name]["kl"])
        assert len(kl) == paper_report["prompts"]["count"] and np.all(kl >= 0)
        assert knobs[name]["max"] == kl.max()
    assert knobs["head 0.0 zero"]["median"] > 1  # no retrieval without the head
    assert paper_report["prompts"]["text"][0] == "4 1 + 4 6 9 5 +"
    patching = paper_report["patching"]
    assert patching["restored"][0][4] == pytest.approx(1.0)


def test_analyze_prints_tables(paper_run):
    result = cli("analyze", paper_run)
    assert result.returncode == 0, result.stderr
    for heading in (
        "The algorithm, measured",
        "Knobs",
        "Logit lens",
        "exact",
        "Circuits",
        "3 retrieve",
        "5 nudge",
        "beta 0",
    ):
        assert heading in result.stdout
    # Sentences are whole, wrapped by the terminal rather than cut to a label's width.
    flat = " ".join(result.stdout.split())
    assert "rule error 0.00% over" in flat and "edges keep" in flat and "AUC against" in flat


def test_analyze_on_the_simulator_run(simulator_run, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(
        "# two prompts, one too long for the context\n4 1 + 4 6\n\n1 2 3 4 5 6 7 8 9 10 + 2 +\n"
    )
    result = cli("analyze", simulator_run, "--prompts", prompts, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["prompts"]["count"] == 2 and "1 cut" in report["prompts"]["source"]
    assert report["prompts"]["text"][1] == "6 7 8 9 10 + 2 +"
    knobs = {k["name"] for k in report["knobs"]}
    assert {"head 0.0 zero", "head 0.1 zero", "head 0.0 mean", "head 0.1 mean"} <= knobs
    assert [s["stage"] for s in report["lens"]["stages"]] == ["embed", "0.attn", "0.mlp"]
    assert "LayerNorms sit inside" in report["lens"]["note"]
    assert report["lens"]["decomposition_error"] < 1e-10
    assert report["circuits"] == circuit_table(load_run(simulator_run).model(), 3)


def test_analyze_bad_input_is_one_line(paper_run, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("4 1 +\n4 banana +\n")
    assert_one_line_error(cli("analyze", paper_run, "--prompts", bad), "line 2", "banana")
    assert_one_line_error(cli("analyze", paper_run, "--step", 123), "step 123")
    assert_one_line_error(cli("analyze", tmp_path), "not a flatformer run")
    assert_one_line_error(cli("analyze", paper_run, "--patch", "4 1 +", "4 +"), "equally long")


def test_generate_is_seeded_and_top_k_1_is_greedy(paper_run):
    def tokens(*args):
        result = cli(
            "generate", paper_run, "--prompt", "4 1 + 4 6 9 5 + 6 3", "-n", 15, "--json", *args
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["tokens"]

    first = tokens("--seed", 5)
    assert len(first) == 15 and first == tokens("--seed", 5)
    assert first != tokens("--seed", 6)
    assert tokens("--top-k", 1, "--seed", 9) == tokens("--greedy")
    result = cli(
        "generate", paper_run, "--prompt", "4 1 + 4 6 9 5 +", "-n", 3, "--greedy", "--verbose"
    )
    assert result.returncode == 0
    assert result.stdout.startswith("prompt     4 1 + 4 6 9 5 +\ngenerated  6")
    assert "draw u" in result.stdout and "greedy" in result.stdout


def test_generate_bad_input_is_one_line(paper_run):
    assert_one_line_error(cli("generate", paper_run, "--prompt", "4 x +"), "'x'", "vocabulary")
    assert_one_line_error(cli("generate", paper_run, "--prompt", "4 1", "--top-p", 2), "top-p")
    assert_one_line_error(cli("generate", paper_run, "--prompt", "  "), "empty")
    assert_one_line_error(
        cli("generate", paper_run, "--prompt", "4 1 +", "--head-off", "0.3"), "no head 0.3"
    )


def test_generate_with_a_head_off_changes_the_answer(paper_run):
    def first(*args):
        result = cli(
            "generate",
            paper_run,
            "--prompt",
            "4 1 + 4 6 9 5 +",
            "-n",
            1,
            "--greedy",
            "--json",
            *args,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["tokens"][0]

    assert first() == 6 and first("--head-off", "0.0") != 6
