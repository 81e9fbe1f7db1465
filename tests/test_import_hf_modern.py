"""Hugging Face folders of Llama, Qwen2, Gemma and GPT-NeoX (Pythia) models: built small with
transformers from random configs (no download), saved with save_pretrained, imported with
`flatformer import`, and held to transformers' own forward pass in float64.

transformers computes RMSNorm and the rotary angles in float32 whatever the model's dtype
(LlamaRMSNorm casts to float32; the rotary module's inverse frequencies are float32), and
GPT-Neo its attention scores. The imported model is held to the unchanged source at float32's
precision, and to 1e-9 once those modules compute in float64 (the same formulas without the
casts); every other line of the forward pass (the projections, the head split, the grouped
keys, rotate_half, the residual wiring, the MLP) is transformers' own in both. Besides the
logits, the residual stream entering every block and after the final norm (transformers'
hidden states) is held to 1e-9; its attention patterns are not, since its eager attention
takes the softmax in float32 too."""

import json
import types

import numpy as np
import pytest
import torch

from clitools import cli
from flatformer.errors import FlatformerError
from flatformer.importers import hf_gpt2
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer

V, T = 13, 10
SMALL = dict(
    vocab_size=V,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=T,
    initializer_range=0.3,  # logits of a few units, not hundredths
)


def build(kind, **overrides):
    import transformers as tf

    torch.manual_seed(0)
    if kind == "llama":
        config = tf.LlamaConfig(**SMALL, num_key_value_heads=2, rms_norm_eps=1e-6, **overrides)
        model = tf.LlamaForCausalLM(config)
    elif kind == "mistral":  # Llama's block; its 4096-token window is wider than the context
        config = tf.MistralConfig(**SMALL, num_key_value_heads=2, **overrides)
        model = tf.MistralForCausalLM(config)
    elif kind == "qwen2":
        config = tf.Qwen2Config(**SMALL, num_key_value_heads=1, **overrides)
        model = tf.Qwen2ForCausalLM(config)
    elif kind == "gpt_neo":
        config = tf.GPTNeoConfig(
            vocab_size=V,
            hidden_size=16,
            intermediate_size=24,
            num_layers=2,
            num_heads=4,
            max_position_embeddings=T,
            attention_types=[[["global", "local"], 1]],
            window_size=3,
            initializer_range=0.3,
            **overrides,
        )
        model = tf.GPTNeoForCausalLM(config)
    elif kind == "gemma":
        config = tf.GemmaConfig(**SMALL, num_key_value_heads=2, head_dim=4, **overrides)
        model = tf.GemmaForCausalLM(config)
    else:
        config = tf.GPTNeoXConfig(**SMALL, **{"rotary_pct": 0.5, **overrides})
        model = tf.GPTNeoXForCausalLM(config)
    model = model.double().eval()
    with torch.no_grad():  # off the initialisation's ones and zeros
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def float64_internals(model):
    """The model with its RMSNorm and rotary modules computing in float64 (the same formulas
    as transformers', without the float32 casts)."""

    def rms(self, x):
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self_eps(self))
        gain = 1.0 + self.weight if type(self).__name__ == "GemmaRMSNorm" else self.weight
        return gain * (x * scale)

    def self_eps(module):
        return getattr(module, "variance_epsilon", getattr(module, "eps", None))

    def rotary(self, x, position_ids):
        dim = 2 * self.inv_freq.numel()
        theta = self.config.rope_parameters["rope_theta"]
        inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs = position_ids[..., None].double() * inv
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def neo_scores(self, query, key, value, attention_mask=None):
        weights = query @ key.transpose(-1, -2)
        q, k = query.size(-2), key.size(-2)
        causal = self.bias[:, :, k - q : k, :k]
        low = torch.tensor(torch.finfo(weights.dtype).min, dtype=weights.dtype)
        weights = torch.where(causal, weights, low)
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = weights.softmax(-1).to(value.dtype)
        return weights @ value, weights

    for module in model.modules():
        name = type(module).__name__
        if name == "GPTNeoSelfAttention":
            module._attn = types.MethodType(neo_scores, module)
        if name.endswith("RMSNorm"):
            module.forward = types.MethodType(rms, module)
        elif name.endswith("RotaryEmbedding"):
            module.forward = types.MethodType(rotary, module)
    return model


def imported_logits(folder, tokens):
    imported = hf_gpt2.read(folder)
    return imported, Transformer(imported.cfg, imported.tensors)(tokens)


CASES = {
    "llama": ("llama", {}),
    "llama-tied-with-biases": ("llama", dict(tie_word_embeddings=True, attention_bias=True)),
    "qwen2": ("qwen2", {}),
    "mistral": ("mistral", {}),
    "gemma": ("gemma", {}),
    "pythia": ("gpt_neox", {}),
    "gpt-neox-sequential": ("gpt_neox", dict(use_parallel_residual=False, rotary_pct=1.0)),
    "gpt-neo": ("gpt_neo", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_imported_logits_equal_transformers(tmp_path, case):
    torch.set_num_threads(1)
    kind, overrides = CASES[case]
    source = build(kind, **overrides)
    source.save_pretrained(tmp_path)
    tokens = np.random.default_rng(0).integers(0, V, (3, T))
    imported, ours = imported_logits(tmp_path, tokens)
    with torch.no_grad():
        as_shipped = source(torch.tensor(tokens)).logits.numpy()
        exact = float64_internals(source)(torch.tensor(tokens)).logits.numpy()
    assert np.abs(ours - exact).max() < 1e-9
    assert np.abs(ours - as_shipped).max() < 1e-5 * max(1.0, np.abs(as_shipped).max())
    # the residual stream entering every block, and after the final norm, is transformers'
    _, cache = Transformer(imported.cfg, imported.tensors).run_with_cache(tokens)
    with torch.no_grad():
        states = source(torch.tensor(tokens), output_hidden_states=True).hidden_states
    L = imported.cfg.n_layers
    for i in range(L):
        assert np.abs(cache[f"blocks.{i}.hook_resid_pre"] - states[i].numpy()).max() < 1e-9
    assert np.abs(cache["ln_final.hook_normalized"] - states[L].numpy()).max() < 1e-9
    assert imported.provenance["format"] == "hf-" + kind.replace("_", "-")
    # the imported model is what the source is, not a GPT-2 that happens to fit
    expected = {
        "llama": {"RMSNorm", "rotary positions", "gated MLP", "grouped-query attention", "SiLU"},
        "qwen2": {"RMSNorm", "rotary positions", "gated MLP", "grouped-query attention", "SiLU"},
        "gemma": {"RMSNorm", "rotary positions", "gated MLP", "grouped-query attention"},
        "mistral": {"RMSNorm", "rotary positions", "gated MLP", "grouped-query attention"},
        "gpt_neox": {"rotary positions"},
        "gpt_neo": {"local attention"},
    }[kind]
    assert expected <= set(imported.cfg.newer_features())
    assert imported.cfg.parallel_attn_mlp == (case == "pythia")


def test_greedy_generation_equals_transformers(tmp_path):
    torch.set_num_threads(1)
    source = float64_internals(build("llama"))
    source.save_pretrained(tmp_path)
    imported = hf_gpt2.read(tmp_path)
    model = Transformer(imported.cfg, imported.tensors)
    with torch.no_grad():
        greedy = source.generate(
            torch.tensor([[1, 2]]), max_new_tokens=8, do_sample=False, pad_token_id=0
        )[0].tolist()
    seq = [1, 2]
    for _ in range(8):
        seq.append(int(np.argmax(model(np.array([seq]))[0, -1])))
    assert seq == greedy


def test_flatformer_import_writes_a_run_that_computes_the_source(tmp_path):
    torch.set_num_threads(1)
    source = float64_internals(build("gpt_neox"))
    source.save_pretrained(tmp_path / "pythia")
    result = cli("import", tmp_path / "pythia", "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "hf-gpt-neox model" in result.stdout
    assert "architecture: rotary positions, parallel attention and MLP" in result.stdout
    run = load_run(tmp_path / "run")
    assert run.cfg.rotary and run.cfg.rotary_dim == 2 and run.cfg.parallel_attn_mlp
    tokens = np.random.default_rng(1).integers(0, V, (2, T))
    with torch.no_grad():
        expected = source(torch.tensor(tokens)).logits.numpy()
    assert np.abs(run.model()(tokens) - expected).max() < 1e-9


@pytest.mark.parametrize(
    "kind, change, message",
    [
        (
            "llama",
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
            "rope_type = 'linear'",
        ),
        ("llama", {"mlp_bias": True}, "mlp_bias = True"),
        ("qwen2", {"use_sliding_window": True}, "use_sliding_window = True"),
        ("mistral", {"sliding_window": 4}, "sliding_window = 4"),
        ("llama", {"hidden_act": "quick_gelu"}, "hidden_act = 'quick_gelu'"),
        ("llama", {"model_type": "mamba"}, "model_type = 'mamba'"),
        ("gemma", {"query_pre_attn_scalar": 8}, "query_pre_attn_scalar = 8"),
    ],
)
def test_what_the_engine_does_not_compute_is_refused_by_its_field(tmp_path, kind, change, message):
    build(kind).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        FlatformerError, match=message.replace("(", r"\(").replace("[", r"\[")
    ) as err:
        hf_gpt2.read(tmp_path)
    assert "\n" not in str(err.value)


def test_a_long_context_is_cut_to_the_engines_and_said(tmp_path):
    build("qwen2").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["max_position_embeddings"] = 32768
    (tmp_path / "config.json").write_text(json.dumps(config))
    imported = hf_gpt2.read(tmp_path)
    assert imported.cfg.n_ctx == 2048
    assert any("32768" in c for c in imported.provenance["changes"])


def test_every_command_computes_the_model(tmp_path):
    """Every view opens an imported Llama-style model: eval, generate, circuits, explore,
    analyze, figures, geometry and graph (the numbers each shows are held to the engine in
    test_edges_architectures.py, test_page_architectures.py, test_views_architectures.py and
    test_graph_architectures.py)."""
    from clitools import cli_here

    build("llama").save_pretrained(tmp_path / "m")
    (tmp_path / "corpus.txt").write_text(" ".join(str(i % V) for i in range(200)))
    made = cli_here(
        "import", tmp_path / "m", "--corpus", tmp_path / "corpus.txt", "--out", tmp_path / "run"
    )
    assert made.returncode == 0, made.stderr
    run = tmp_path / "run"
    assert "held-out loss" in cli_here("eval", run).stdout
    assert "generated" in cli_here("generate", run, "--prompt", "1 2 3", "-n", "4").stdout
    circuits = cli_here("circuits", run, "--prompts", "12", "--json")
    assert circuits.returncode == 0, circuits.stderr
    report = json.loads(circuits.stdout)
    assert "pos" not in report["nodes"] and report["ablated_metric"] > report["clean_metric"]
    page = cli_here("explore", run, "--out", tmp_path / "page.html")
    assert page.returncode == 0 and (tmp_path / "page.html").stat().st_size > 10_000, page.stderr
    for command in (
        ["analyze", run],
        # the points and QK figures, which read the rotated queries and keys (every figure of
        # these architectures: test_views_architectures.py)
        ["figures", run, "--out", tmp_path / "figs", "--only", "fig05,fig07", "--jobs", "1"],
        ["geometry", run],
        ["graph", run, "--prompt", "1 2 3", "--out", tmp_path / "graph"],
    ):
        done = cli_here(*command)
        assert done.returncode == 0, done.stderr
