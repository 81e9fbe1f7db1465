"""`flatformer import` as a user runs it: a run that generates, and one-line refusals."""

import json

from clitools import assert_one_line_error, cli
from test_import_hf import gpt2
from test_import_nanogpt import write_source


def test_import_then_generate_from_text(tmp_path):
    write_source(tmp_path)
    made = cli(
        "import", tmp_path / "ckpt.pt", "--vocab", tmp_path / "meta.pkl", "--out", tmp_path / "run"
    )
    assert made.returncode == 0, made.stderr
    assert "nanogpt model" in made.stdout
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["task"] == "imported" and len(config["imported"]["sha256"]) == 64
    generated = cli("generate", tmp_path / "run", "--prompt", "abc", "-n", "5")
    assert generated.returncode == 0, generated.stderr
    assert_one_line_error(
        cli("import", tmp_path / "ckpt.pt", "--out", tmp_path / "run"), "already holds a run"
    )


def test_refusals_are_one_line_naming_the_field_and_value(tmp_path):
    gpt2(tmp_path / "eps", True, layer_norm_epsilon=1e-6)
    assert_one_line_error(
        cli("import", tmp_path / "eps", "--out", tmp_path / "r1"), "layer_norm_epsilon", "1e-06"
    )
    gpt2(tmp_path / "act", True, activation_function="quick_gelu")
    assert_one_line_error(
        cli("import", tmp_path / "act", "--out", tmp_path / "r2"),
        "activation_function",
        "quick_gelu",
    )
    gpt2(tmp_path / "scale", True, scale_attn_by_inverse_layer_idx=True)
    assert_one_line_error(
        cli("import", tmp_path / "scale", "--out", tmp_path / "r3"),
        "scale_attn_by_inverse_layer_idx",
    )
    write_source(tmp_path)
    (tmp_path / "meta.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    assert_one_line_error(
        cli(
            "import",
            tmp_path / "ckpt.pt",
            "--vocab",
            tmp_path / "meta.pkl",
            "--out",
            tmp_path / "r4",
        ),
        "os.system",
    )
    assert_one_line_error(
        cli("import", tmp_path / "ckpt.pt", "--format", "gguf", "--out", tmp_path / "r5"), "gguf"
    )
