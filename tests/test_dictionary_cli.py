"""`flatformer dictionary` as a user runs it: SAELens folders and metrics.json written, the table
printed, several widths trained together, a transcoder on a model with LayerNorm, and one-line
refusals."""

from __future__ import annotations

import json

import pytest

from clitools import assert_one_line_error, cli_here
from conftest import make_run
from flatformer.dictionary.saelens import load_saelens


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("dict") / "run", steps=300)


def test_command_writes_saelens_folders_and_metrics(small_run, tmp_path):
    out = tmp_path / "d"
    r = cli_here(
        "dictionary", small_run, "--hook", "blocks.0.hook_resid_post", "--kind", "topk",
        "--width", "4", "--width", "8", "--k", "1", "--steps", "60", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "topk-w4-k1" in r.stdout and "topk-w8-k1" in r.stdout and "FVU" in r.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert [m["name"] for m in metrics["members"]] == ["topk-w4-k1", "topk-w8-k1"]
    for m in metrics["members"]:
        v = m["metrics"]
        assert v["l0"] <= 1 and 0 <= v["dead"] <= m["width"] and len(m["latents"]) == m["width"]
        assert v["ce_loss_with_ablation"] > v["ce_loss_without_sae"]
        cfg, weights = load_saelens(out / m["name"])
        assert cfg["architecture"] == "topk" and cfg["k"] == 1
        assert weights["W_enc"].shape == (2, m["width"]) and weights["W_dec"].shape == (
            m["width"],
            2,
        )
        assert cfg["metadata"]["hook_name"] == "blocks.0.hook_resid_post"
    # the feature dashboards, one offline page for both dictionaries (tests/test_dashboards*)
    page = (out / "dashboards.html").read_text()
    assert "flatformer-dashboards-1" in page and "dashboards.html" in r.stdout
    island = page.split('<script id="flatformer-data" type="application/json">')[1]
    data = json.loads(island.split("</script>")[0])
    assert [(d["name"], d["kind"]) for d in data["dictionaries"]] == [
        ("topk-w4-k1", "topk"),
        ("topk-w8-k1", "topk"),
    ]
    # rebuilt by dictionary-page, from the run metrics.json names, into a file of our choice
    r = cli_here("dictionary-page", out, "--out", tmp_path / "again.html")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again.html").read_text() == page
    # one SAELens folder, read on a run given by --run
    r = cli_here("dictionary-page", out / "topk-w4-k1", "--run", small_run)
    assert r.returncode == 0, r.stderr
    assert "topk-w4-k1" in (out / "topk-w4-k1" / "dashboards.html").read_text()


def test_dictionary_page_refusals_are_one_line(small_run, tmp_path):
    assert_one_line_error(cli_here("dictionary-page", tmp_path), "give --run")
    assert_one_line_error(cli_here("dictionary-page", tmp_path, "--run", small_run), "SAELens")
    (tmp_path / "metrics.json").write_text(
        json.dumps({"run": str(small_run), "members": [{"name": "../escape"}]})
    )
    assert_one_line_error(cli_here("dictionary-page", tmp_path), "lists no dictionaries")
    (tmp_path / "metrics.json").write_text(json.dumps({"run": str(tmp_path / "gone")}))
    assert_one_line_error(cli_here("dictionary-page", tmp_path), "not here: give --run")


def test_transcoder_reads_the_mlp_input_after_layernorm(tmp_path):
    run = make_run(tmp_path / "sim", preset_name="simulator-16d", steps=50, candidates=1)
    out = tmp_path / "t"
    r = cli_here(
        "dictionary", run, "--hook", "blocks.0.hook_mlp_out", "--kind", "transcoder",
        "--width", "8", "--l1", "0.1", "--steps", "30", "--json", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["name"] == "transcoder-w8-c0.1"
    cfg, weights = load_saelens(out / "transcoder-w8-c0.1")
    assert cfg["architecture"] == "transcoder" and not cfg["apply_b_dec_to_input"]
    assert cfg["metadata"]["hook_name"] == "blocks.0.ln2.hook_normalized"
    assert cfg["metadata"]["hook_name_out"] == "blocks.0.hook_mlp_out"


@pytest.mark.parametrize(
    "args,words",
    [
        (["--kind", "gated"], ["--kind", "gated"]),
        (["--hook", "blocks.0.hook_nothing"], ["no activation named"]),
        (["--hook", "blocks.0.attn.hook_pattern"], ["not a vector per token"]),
        (["--k", "9", "--width", "4"], ["--k"]),
        (["--steps", "0"], ["--steps"]),
        (["--kind", "transcoder", "--hook", "hook_embed"], ["blocks.L"]),
    ],
)
def test_refusals_are_one_line(small_run, tmp_path, args, words):
    assert_one_line_error(cli_here("dictionary", small_run, "--out", tmp_path, *args), *words)


HIST = """
from flatformer.rasp import library
program = library.make_hist()
"""


def test_a_compressed_compiled_program_scores_dictionaries_against_its_variables(tmp_path):
    """The data are the program's inputs; the true features at resid_post are the token and
    histogram values (and the width head's scratch), each a row of the compression map."""
    (tmp_path / "hist.py").write_text(HIST)
    run = tmp_path / "hist"
    made = cli_here(
        "compile",
        tmp_path / "hist.py",
        "--vocab",
        "1,2,3",
        "--max-len",
        "4",
        "--out",
        run,
        "--compress",
        "9",
        "--compress-steps",
        "3",
    )
    assert made.returncode == 0, made.stderr
    out = tmp_path / "dict"
    made = cli_here(
        "dictionary",
        run,
        "--hook",
        "blocks.0.hook_resid_post",
        "--width",
        "12",
        "--k",
        "2",
        "--steps",
        "30",
        "--out",
        out,
    )
    assert made.returncode == 0, made.stderr
    assert "against the program's" in made.stdout
    summary = json.loads((out / "metrics.json").read_text())
    truth = summary["members"][0]["metrics"]["truth"]
    config = json.loads((run / "config.json").read_text())["imported"]
    present = config["rasp"]["present"]["blocks.0.hook_resid_post"]
    assert truth["features"] == len(present) and "hist:1" in present and "tokens:3" in present
    assert truth["recovered"] + truth["missed"] == truth["features"]
    assert 0 <= truth["mcc"] <= 1
    # the training data are inputs of max_len values: BOS and 4 tokens, no padding rows
    assert summary["eval_tokens"] % 5 == 0
    page = (out / "dashboards.html").read_text()
    assert "hist:1" in page
