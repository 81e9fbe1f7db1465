"""What the engine does not have is refused by name: one line naming the field and its value,
and a non-zero exit, for every format the field can appear in."""

import json

import pytest
import torch
from clitools import assert_one_line_error, cli, cli_here
from test_import_hf import gpt2

from test_import_tl import GROKKING, legacy_state

LN = dict(GROKKING, normalization_type="LN")
TL_REFUSALS = [
    ("positional_embedding_type", "rotary", GROKKING),
    ("positional_embedding_type", "shortformer", GROKKING),
    ("normalization_type", "RMS", GROKKING),
    ("normalization_type", "RMSPre", GROKKING),
    ("parallel_attn_mlp", True, GROKKING),
    ("n_key_value_heads", 2, GROKKING),
    ("gated_mlp", True, GROKKING),
    ("output_logits_soft_cap", 30.0, GROKKING),
    ("attn_scores_soft_cap", 50.0, GROKKING),
    ("eps", 1e-6, LN),
    ("act_fn", "silu", GROKKING),
    ("attention_dir", "sideways", GROKKING),
    ("attn_scale", 2.5, GROKKING),
]


@pytest.fixture(scope="module")
def tl_weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tl")
    for name, c in (("plain", GROKKING), ("ln", LN)):
        torch.save(legacy_state(c, torch.float64), folder / f"{name}.pt")
    return folder


@pytest.mark.parametrize(
    "field, value, base", TL_REFUSALS, ids=[f"{f}={v}" for f, v, _ in TL_REFUSALS]
)
def test_a_transformer_lens_config_is_refused_by_field_and_value(
    tmp_path, tl_weights, field, value, base
):
    (tmp_path / "cfg.json").write_text(json.dumps({**base, field: value}))
    weights = tl_weights / ("ln.pt" if base is LN else "plain.pt")
    result = cli_here(
        "import", weights, "--config", tmp_path / "cfg.json", "--out", tmp_path / "run"
    )
    assert_one_line_error(result, field, repr(value))
    assert not (tmp_path / "run").exists()


def test_the_same_config_with_the_field_at_its_neutral_value_imports(tmp_path, tl_weights):
    neutral = dict(LN, positional_embedding_type="standard", parallel_attn_mlp=False,
                   n_key_value_heads=None, gated_mlp=False, output_logits_soft_cap=-1.0,
                   attn_scores_soft_cap=-1.0, eps=1e-5, attention_dir="causal")  # fmt: skip
    (tmp_path / "cfg.json").write_text(json.dumps(neutral))
    made = cli_here(
        "import", tl_weights / "ln.pt", "--config", tmp_path / "cfg.json", "--out", tmp_path / "run"
    )
    assert made.returncode == 0, made.stderr
    assert "transformer-lens model" in made.stdout


def test_an_unknown_config_field_is_refused_by_name(tmp_path, tl_weights):
    (tmp_path / "cfg.json").write_text(json.dumps(dict(GROKKING, use_flux_capacitor=True)))
    result = cli_here(
        "import",
        tl_weights / "plain.pt",
        "--config",
        tmp_path / "cfg.json",
        "--out",
        tmp_path / "r",
    )
    assert_one_line_error(result, "use_flux_capacitor")


def test_a_tl_state_dict_without_its_config_is_told_to_give_one(tmp_path, tl_weights):
    result = cli("import", tl_weights / "plain.pt", "--out", tmp_path / "r")
    assert_one_line_error(result, "--config")


def test_a_hugging_face_folder_of_another_architecture_is_refused_by_model_type(tmp_path):
    gpt2(tmp_path / "m", True)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config.update(model_type="llama", rope_theta=10000.0)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert_one_line_error(
        cli_here("import", tmp_path / "m", "--out", tmp_path / "r"), "model_type", "'llama'"
    )


@pytest.mark.parametrize(
    "config, words",
    [
        ([1, 2], ["must be an object"]),
        (dict(GROKKING, output_logits_soft_cap="big"), ["wrong type", "'big'"]),
        (dict(GROKKING, d_vocab_out=[1]), ["d_vocab_out", "whole number"]),
        ({k: v for k, v in GROKKING.items() if k != "d_head"}, ["lacks a size", "d_head"]),
        (dict(GROKKING, d_model=24), ["shape"]),
    ],
)
def test_a_malformed_tl_config_is_one_line(tmp_path, tl_weights, config, words):
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    result = cli_here("import", tl_weights / "plain.pt", "--config", tmp_path / "cfg.json",
                      "--out", tmp_path / "r")  # fmt: skip
    assert_one_line_error(result, *words)


def test_a_pt_file_that_is_not_a_state_dict_is_one_line(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    (tmp_path / "cfg.json").write_text(json.dumps(GROKKING))
    result = cli_here("import", tmp_path / "list.pt", "--config", tmp_path / "cfg.json",
                      "--out", tmp_path / "r")  # fmt: skip
    assert_one_line_error(result, "not a state dict")
