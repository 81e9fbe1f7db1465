"""An imported run is a run: eval (on its held-out text, or any text), generate, analyze,
figures and circuits work on a nanoGPT character model, checked against the PyTorch source."""

import json

import numpy as np
import pytest
import torch
from clitools import assert_one_line_error, cli_here
from test_import_nanogpt import greedy, write_source

CHARS = "abcdefghi \n"
T = 12  # the test model's block_size


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(folder, the PyTorch model, the held-out text): 4 * T + 1 characters, so every target
    falls in a full window and the task's held-out windows are exactly the text's."""
    folder = tmp_path_factory.mktemp("imported")
    gpt = write_source(folder, CHARS)
    text = "".join(np.random.default_rng(5).choice(list(CHARS), 4 * T + 1))
    (folder / "val.txt").write_text(text)
    made = cli_here(
        "import", folder / "ckpt.pt", "--vocab", folder / "meta.pkl",
        "--corpus", folder / "val.txt", "--out", folder / "run",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "held-out text: 49 tokens" in made.stdout
    return folder, gpt, text


def source_loss(gpt, ids):
    """Each token predicted once, from the window of T it falls in: an explicit loop."""
    total = 0.0
    with torch.no_grad():
        for j in range(1, len(ids)):
            start = (j - 1) // T * T
            logits = gpt(torch.tensor([ids[start:j]]))[0, -1]
            total -= float(torch.log_softmax(logits, -1)[ids[j]])
    return total / (len(ids) - 1)


def as_json(*args):
    result = cli_here(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_eval_on_a_text_and_on_the_runs_held_out_text_equal_the_source_loss(imported, tmp_path):
    folder, gpt, text = imported
    ids = [CHARS.index(c) for c in text]
    expected = source_loss(gpt, ids)
    on_text = as_json("eval", folder / "run", "--corpus", folder / "val.txt")
    assert on_text["predictions"] == len(ids) - 1
    assert abs(on_text["loss"] - expected) < 1e-9
    held = as_json("eval", folder / "run")
    assert abs(held["loss"] - expected) < 1e-9
    assert 0 <= held["rule_error"] <= 1
    # A text not a multiple of the context: the last window is shorter, still one prediction each.
    odd = text[:30]
    (tmp_path / "odd.txt").write_text(odd)
    short = as_json("eval", folder / "run", "--corpus", tmp_path / "odd.txt")
    assert short["predictions"] == 29
    assert abs(short["loss"] - source_loss(gpt, ids[:30])) < 1e-9
    (tmp_path / "bad.txt").write_text("abc xyz")
    assert_one_line_error(cli_here("eval", folder / "run", "--corpus", tmp_path / "bad.txt"), "'x'")


def test_an_imported_run_without_a_text_says_how_to_give_one(tmp_path):
    write_source(tmp_path, CHARS)
    made = cli_here("import", tmp_path / "ckpt.pt", "--vocab", tmp_path / "meta.pkl",
                    "--out", tmp_path / "run")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert_one_line_error(cli_here("analyze", tmp_path / "run"), "--corpus")
    assert_one_line_error(cli_here("eval", tmp_path / "run"), "--corpus")
    row = {"prompt": "abc", "target": "d", "corrupt": "abd", "corrupt_target": "e"}
    (tmp_path / "ex.jsonl").write_text(json.dumps(row) + "\n")
    for ablation in ("resample", "zero"):  # examples alone suffice: no text needed
        report = as_json("circuits", tmp_path / "run", "--prompts", tmp_path / "ex.jsonl",
                         "--ablation", ablation)  # fmt: skip
        assert report["prompts"] == 1
    assert_one_line_error(
        cli_here("circuits", tmp_path / "run", "--prompts", tmp_path / "ex.jsonl"), "--corpus"
    )
    (tmp_path / "tiny.txt").write_text("abc")
    assert_one_line_error(
        cli_here("import", tmp_path / "ckpt.pt", "--vocab", tmp_path / "meta.pkl",
                 "--corpus", tmp_path / "tiny.txt", "--out", tmp_path / "r2"),
        "3 tokens", "13",
    )  # fmt: skip


def test_generate_greedy_continues_as_the_source_does(imported):
    folder, gpt, _ = imported
    result = as_json("generate", folder / "run", "--prompt", "abc", "-n", "10", "--greedy")

    def step(t):
        with torch.no_grad():
            return gpt(torch.tensor(t)).numpy()

    assert result["tokens"] == greedy(step, [0, 1, 2], 10)[3:]


def test_analyze_reports_knobs_lens_and_the_heads_singular_values_of_the_source(imported):
    folder, gpt, _ = imported
    report = as_json("analyze", folder / "run")
    assert report["task"] == "imported" and report["held_out"]["rule_positions"] > 0
    names = {k["name"] for k in report["knobs"]}
    assert {"head 1.1 zero", "mlp 0 off", "positions off", "beta 2"} <= names
    assert all(k["min"] >= -1e-12 for k in report["knobs"])
    last = report["lens"]["stages"][-1]
    assert last["agrees"] == 1.0 and abs(last["kl"]) < 1e-9
    assert report["lens"]["decomposition_error"] < 1e-9
    d, H = 16, 2
    W = gpt.transformer.h[0].attn.c_attn.weight.detach().numpy()  # (3d, d), nn.Linear's
    Wq, Wk = W[:d].T, W[d : 2 * d].T
    for head in report["circuits"][:H]:  # layer 0
        cols = slice(head["head"] * d // H, (head["head"] + 1) * d // H)
        qk = np.linalg.svd(Wq[:, cols] @ Wk[:, cols].T, compute_uv=False)
        shown = head["qk_singular"]
        assert np.allclose(shown, qk[: len(shown)], rtol=1e-3, atol=1e-3)


def test_figures_draw_the_planes_of_an_imported_run(imported, tmp_path):
    folder, _, _ = imported
    made = cli_here("figures", folder / "run", "--only", "fig05,fig07,fig14", "--jobs", "1",
                    "--out", tmp_path / "figs")  # fmt: skip
    assert made.returncode == 0, made.stderr
    drawn = sorted(p.name for p in (tmp_path / "figs").glob("*.png"))
    assert drawn == ["fig05_embeddings.png", "fig07_qk_space.png", "fig14_trace_values.png"]
    assert all((tmp_path / "figs" / name).stat().st_size > 5000 for name in drawn)


def test_circuits_read_examples_given_for_the_imported_model(imported, tmp_path):
    folder, _, _ = imported
    rows = [
        {"prompt": "abc", "target": "d", "corrupt": "abd", "corrupt_target": "e"},
        {"prompt": "bcde", "target": "f", "corrupt": "bcdf", "corrupt_target": "g"},
        {"prompt": "ghi", "target": " ", "corrupt": "gha", "corrupt_target": "b"},
    ]
    (tmp_path / "ex.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for ablation in ("mean", "resample"):
        report = as_json("circuits", folder / "run", "--prompts", tmp_path / "ex.jsonl",
                         "--ablation", ablation)  # fmt: skip
        assert report["prompts"] == 3 and report["ablation"] == ablation
        circuit = report["circuit"]
        assert 1 <= circuit["edges_kept"] <= circuit["edges_total"]


def test_explore_says_in_one_line_when_a_model_is_above_what_the_page_carries(tmp_path):
    from flatformer.config import ModelConfig
    from flatformer.importers.common import Imported
    from flatformer.importers.run import write_run
    from flatformer.tasks.imported import ImportedTask

    cfg = ModelConfig(d_model=128, n_heads=4, d_head=32, n_layers=5, d_mlp=512, n_ctx=64,
                      d_vocab=500, act_fn="gelu_erf", normalization="pre_ln", attn_out=True,
                      ln_final=True)  # fmt: skip
    assert cfg.n_params > 1_000_000
    tensors = {k: np.full(shape, 0.01) for k, shape in cfg.param_shapes().items()}
    task = ImportedTask([str(i) for i in range(500)])
    run = write_run(Imported(cfg, tensors, None, {"format": "test", "changes": []}), task,
                    tmp_path / "big")  # fmt: skip
    assert_one_line_error(
        cli_here("explore", run, "--out", tmp_path / "big.html"),
        f"{cfg.n_params:,} parameters", "1,000,000", "analyze",
    )  # fmt: skip
    assert not (tmp_path / "big.html").exists()


def test_a_transformer_lens_state_dict_imports_from_the_command_line_as_a_run(tmp_path):
    """The grokking-shaped config (d_vocab_out < d_vocab, ids for tokens): import, generate
    greedily as TransformerLens does, and eval on a text of ids."""
    from test_import_tl import CASES, legacy_state, save, tl_model

    c = CASES["gelu-ln"]
    legacy = legacy_state(c, torch.float64)
    bridge = tl_model(c, legacy, torch.float64)
    path, cfg = save(tmp_path, bridge.state_dict(), dict(c, architecture="TransformerLensNative"),
                     ".safetensors")  # fmt: skip
    ids = np.random.default_rng(3).integers(0, c["d_vocab_out"], 40)
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)))
    made = cli_here("import", path, "--config", cfg, "--corpus", tmp_path / "ids.txt",
                    "--out", tmp_path / "run")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "transformer-lens-bridge model" in made.stdout
    result = as_json("generate", tmp_path / "run", "--prompt", "1 2", "-n", "8", "--greedy")

    def step(t):
        with torch.no_grad():
            return bridge(torch.tensor(t)).numpy()

    seq = [1, 2]
    for _ in range(8):
        seq.append(int(np.argmax(step(np.array([seq[-c["n_ctx"] :]]))[0, -1])))
    assert result["tokens"] == seq[2:]
    held = as_json("eval", tmp_path / "run")
    assert np.isfinite(held["loss"])
    (tmp_path / "bad.txt").write_text("1 2 13 4")  # 13 is in d_vocab but never predicted
    assert_one_line_error(
        cli_here("eval", tmp_path / "run", "--corpus", tmp_path / "bad.txt"), "never predicts"
    )
