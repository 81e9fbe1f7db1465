"""The explorer's export, page assembly and command, without a browser (see
test_explorer_browser.py for the page itself)."""

import base64
import hashlib
import html
import json
import re
import shutil
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import random_model as random_weights
from flatformer.commands.app import app
from flatformer.commands.cli import load_commands
from flatformer.config import preset
from flatformer.errors import FlatformerError
from flatformer.explorer import render_html
from flatformer.explorer.export import (
    export_model,
    export_run,
    pick_steps,
    reference_prompts,
    unpack,
)
from flatformer.store.runs import load_run

load_commands()
EVIL = "<img src=x onerror=alert(1)>"


def data_of(page: str) -> dict:
    """The JSON the page carries, read back the way the browser reads it."""
    match = re.search(
        r'<script id="flatformer-data" type="application/json">(.*?)</script>', page, re.S
    )
    return json.loads(match.group(1))


def random_model(cfg, seed=0):
    return random_weights(cfg, seed, perturb=False)


def test_weights_round_trip_exactly_for_every_exported_step(paper_run):
    run = load_run(paper_run)
    data = export_run(run, max_checkpoints=7)
    flat = unpack(data["weights"]).reshape(len(data["steps"]), run.cfg.n_params)
    for row, step in zip(flat, data["steps"]):
        weights = run.weights(step)
        offset = 0
        for name, shape in data["tensors"]:
            size = int(np.prod(shape))
            np.testing.assert_array_equal(row[offset : offset + size].reshape(shape), weights[name])
            offset += size
    assert data["steps"][0] == 0 and data["steps"][-1] == run.steps[-1]
    assert len(data["steps"]) == 7


def test_reference_prompts_cover_every_token_and_position_and_match_the_engine(simulator_run):
    run = load_run(simulator_run)
    data = export_run(run)
    prompts = data["reference"]["prompts"]
    assert len(prompts) >= 9
    assert {t for p in prompts for t in p} == set(range(run.cfg.d_vocab))
    assert {i for p in prompts for i in range(len(p))} == set(range(run.cfg.n_ctx))
    assert any(len(p) < run.cfg.n_ctx for p in prompts)  # the short-sequence path too
    logits = unpack(data["reference"]["logits"])
    model = run.model(data["reference"]["step"])
    expected = np.concatenate([model(p)[0].ravel() for p in prompts])
    np.testing.assert_array_equal(logits, expected)
    # The task's demo sequence is the first prompt and the page's opening sequence.
    assert prompts[0] == data["demo"] == run.task.encode(run.task.demo)


def test_reference_prompts_stretch_to_big_vocabularies():
    prompts = reference_prompts(100, 8)
    assert {t for p in prompts for t in p} == set(range(100))
    assert len(prompts) >= 9


def test_checkpoint_subset_is_evenly_spaced_and_keeps_the_chosen_step():
    steps = list(range(0, 20001, 100))
    picked = pick_steps(steps, 5, 12300)
    assert picked == [0, 5000, 10000, 12300, 15000, 20000]
    assert pick_steps(steps[:4], 10, 0) == steps[:4]


def test_the_default_subset_keeps_big_models_small(simulator_run, paper_run, monkeypatch):
    assert len(export_run(paper_run)["steps"]) == len(load_run(paper_run).steps) == 201
    sim = load_run(simulator_run)
    monkeypatch.setattr("flatformer.explorer.export.NUMBER_BUDGET", 4 * sim.cfg.n_params)
    assert export_run(sim)["steps"] == [0, 300, 700, 1000]


def test_page_is_deterministic_and_independent_of_where_the_run_lives(paper_run, tmp_path):
    first = render_html(paper_run)
    copy = tmp_path / "elsewhere" / paper_run.name
    shutil.copytree(paper_run, copy)
    assert render_html(copy) == first
    assert render_html(paper_run, step=0) != first


def test_vocabulary_markup_cannot_escape_the_data_block():
    cfg = preset("paper-2d", 4)
    vocab = ["a", EVIL, "</script><script>alert(2)</script>", "&amp; <!--"]
    page = render_html(random_model(cfg), vocab=vocab)
    data = data_of(page)
    assert data["vocab"] == vocab
    # Outside the data block (JSON with < > & escaped), the words never appear raw.
    assert EVIL not in page and "alert(2)" in page and "<script>alert" not in page
    assert page.count("<script") == 2


def test_content_security_policy_pins_the_one_script():
    page = render_html(random_model(preset("paper-2d", 4)), vocab=list("abcd"))
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in policy


def test_inline_page_is_an_iframe_whose_srcdoc_is_the_page(paper_run):
    frame = render_html(paper_run, inline=True)
    assert frame.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in frame
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert html.unescape(srcdoc) == render_html(paper_run)


def test_export_from_a_model_needs_a_matching_vocabulary():
    model = random_model(preset("paper-2d", 3))
    with pytest.raises(FlatformerError, match="3"):
        export_model(model, ["a", "b"])
    with pytest.raises(FlatformerError, match="distinct"):
        export_model(model, ["a", "a", "b"])
    with pytest.raises(FlatformerError, match="vocab"):
        render_html(model)


def test_explore_command_writes_the_page(paper_run, tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "explore",
            str(paper_run),
            "--step",
            "10000",
            "--out",
            str(tmp_path / "page.html"),
            "--checkpoints",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    data = data_of((tmp_path / "page.html").read_text())
    assert data["step"] == 10000 and data["steps"] == [0, 10000, 20000]
    run = tmp_path / "run"  # a copy: the shared fixture folder stays untouched
    shutil.copytree(paper_run, run)
    result = runner.invoke(app, ["explore", str(run), "--checkpoints", "2"])
    assert result.exit_code == 0, result.output
    assert data_of((run / "explorer.html").read_text())["steps"] == [0, 20000]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--step", "12345"], "no checkpoint at step 12345"),
        (["--out", "/nonexistent/folder/x.html"], "does not exist"),
        (["--checkpoints", "0"], "at least 1"),
    ],
)
def test_explore_command_refuses_bad_input_in_one_line(paper_run, args, message):
    result = CliRunner().invoke(app, ["explore", str(paper_run), *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, FlatformerError) and message in str(result.exception)


def test_server_binds_loopback_and_serves_only_the_page():
    from flatformer.commands.explore import make_server

    server = make_server(b"<!DOCTYPE html>page", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as reply:
            assert reply.read() == b"<!DOCTYPE html>page"
            assert reply.headers["Content-Type"].startswith("text/html")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/../config.json")
    finally:
        server.shutdown()
        server.server_close()
