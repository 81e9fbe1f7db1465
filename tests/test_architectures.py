"""The architectures of the field's small models (RMSNorm, rotary positions, gated MLPs,
parallel attention and MLP, grouped-query attention): each component's backward against
PyTorch's autograd, and the reference model composed of them against the torch bridge, which
is written independently (logits, every hook, every gradient, float64)."""

import math

import numpy as np
import pytest
import torch

from flatformer.model.bridge import TorchTransformer
from flatformer.config import ModelConfig
from flatformer.engine import components as C
from flatformer.engine import select
from flatformer.engine.gradcheck import THRESHOLD, gradcheck
from flatformer.engine.model import backward, cross_entropy, forward, hook_names, init_params
from flatformer.errors import FlatformerError
from flatformer.model.transformer import Transformer

RNG = np.random.default_rng(0)

BASE = dict(d_model=16, n_heads=4, d_head=4, n_layers=2, d_mlp=24, n_ctx=7, d_vocab=11)
ARCHITECTURES = {
    # Llama, Mistral, Qwen: RMSNorm, rotary halves, SwiGLU, grouped keys and values
    "llama": dict(
        normalization="pre_rms",
        eps=1e-6,
        positional_embedding_type="rotary",
        gated_mlp=True,
        act_fn="silu",
        n_key_value_heads=2,
        attn_out=True,
        unembed_bias=False,
        ln_final=True,
    ),
    # Qwen2: as Llama with q, k and v biases, one key and value head (multi-query)
    "qwen": dict(
        normalization="pre_rms",
        positional_embedding_type="rotary",
        rotary_base=1e6,
        gated_mlp=True,
        act_fn="silu",
        n_key_value_heads=1,
        qkv_bias=True,
        attn_out=True,
        ln_final=True,
    ),
    # Pythia (GPT-NeoX): LayerNorm, a quarter of each head rotated, parallel attention and MLP
    "pythia": dict(
        normalization="pre_ln",
        positional_embedding_type="rotary",
        rotary_dim=2,
        parallel_attn_mlp=True,
        act_fn="gelu_erf",
        qkv_bias=True,
        attn_out=True,
        attn_out_bias=True,
        ln_final=True,
        unembed_bias=False,
    ),
    # GPT-J: neighbouring pairs rotated, parallel, GeGLU here to cross the features
    "gptj": dict(
        normalization="pre_ln",
        eps=1e-6,
        positional_embedding_type="rotary",
        rotary_adjacent_pairs=True,
        parallel_attn_mlp=True,
        gated_mlp=True,
        act_fn="gelu",
        attn_out=True,
    ),
    # the features without normalisation, learned positions kept
    "bare": dict(gated_mlp=True, act_fn="silu", parallel_attn_mlp=True, n_key_value_heads=2),
    "rms-only": dict(normalization="pre_rms", ln_final=True, attn_out=True),
    # TransformerLens's solu-1l to 4l: SoLU with its LayerNorm over the neurons
    "solu": dict(normalization="pre_ln", act_fn="solu_ln", attn_out=True, ln_final=True),
    # TransformerLens's attn-only-Nl and redwood models: positions in q and k's inputs only
    "shortformer": dict(
        positional_embedding_type="shortformer", d_mlp=0, normalization="pre_ln", attn_out=True
    ),
    "shortformer-mlp": dict(positional_embedding_type="shortformer", n_key_value_heads=2),
    # GPT-Neo: global and local layers, a local query reading the 3 latest keys
    "gpt-neo": dict(
        normalization="pre_ln",
        attn_types=("global", "local"),
        window_size=3,
        attn_out=True,
        ln_final=True,
        act_fn="gelu",
    ),
}


@pytest.fixture(params=list(ARCHITECTURES))
def arch(request):
    return ModelConfig(**{**BASE, **ARCHITECTURES[request.param]})


def t(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def close(got, want, tol=1e-9):
    """Equal to tol relative to the largest finite entry (masked scores are -inf in both)."""
    want = np.asarray(want)
    top = np.abs(want[np.isfinite(want)]).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * top)


def random_batch(cfg, S=2, B=3, seed=0):
    rng = np.random.default_rng(seed)
    params = init_params(cfg, [np.random.default_rng([seed, s]) for s in range(S)])
    for name, view in params.views.items():
        if "ln" in name or "b_" in name:
            view += 0.3 * rng.standard_normal(view.shape)
    tokens = rng.integers(0, cfg.d_vocab, (S, B, cfg.n_ctx))
    targets = rng.integers(0, cfg.vocab_out, tokens.shape)
    weights = (rng.random(tokens.shape) > 0.3).astype(float)
    return params, tokens, targets, weights


# ---- each component's backward against autograd -------------------------------------------


@pytest.mark.parametrize("lead, wshape", [((), (6,)), ((3,), (3, 1, 6)), ((4, 2), (6,))])
def test_rms_norm_and_its_backward_are_autograds(lead, wshape):
    x = RNG.standard_normal((*lead, 5, 6)) * 2 + 0.5
    w = RNG.standard_normal(wshape)
    y, x_hat, scale = C.rms_norm(x, w, 1e-6)
    tx, tw = t(x), t(w)
    ty = torch.nn.functional.rms_norm(tx, (6,), eps=1e-6) * tw
    close(y, ty.detach().numpy())
    close(scale, np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6))
    dy = RNG.standard_normal(y.shape)
    (ty * t(dy)).sum().backward()
    for got, want in zip(C.rms_norm_backward(dy, x_hat, scale, w), (tx.grad, tw.grad)):
        assert got.shape == want.shape
        close(got, want.numpy())


@pytest.mark.parametrize("adjacent", [False, True])
@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_rotary_turns_each_pair_by_its_angle_and_its_backward_is_autograds(adjacent, rotary_dim):
    T, dh, base = 6, 8, 100.0
    cos, sin = C.rotary_tables(T, rotary_dim, base, adjacent)
    x = RNG.standard_normal((2, T, dh))
    y = C.rotary(x, cos, sin, adjacent)
    # the oracle: pair i of position p turned by the angle p / base^(2i / r), as a 2-d rotation
    want = x.copy()
    for p in range(T):
        for i in range(rotary_dim // 2):
            a, b = (2 * i, 2 * i + 1) if adjacent else (i, i + rotary_dim // 2)
            angle = p / base ** (2 * i / rotary_dim)
            c, s = math.cos(angle), math.sin(angle)
            want[:, p, a] = x[:, p, a] * c - x[:, p, b] * s
            want[:, p, b] = x[:, p, b] * c + x[:, p, a] * s
    close(y, want)
    # a rotation keeps norms, and scores depend only on the distance between positions
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    dy = RNG.standard_normal(y.shape)
    tx = t(x)
    tc, ts = torch.tensor(cos), torch.tensor(sin)
    head, rest = tx[..., :rotary_dim], tx[..., rotary_dim:]
    if adjacent:
        turned = torch.stack([-head[..., 1::2], head[..., 0::2]], -1).flatten(-2)
    else:
        turned = torch.cat([-head[..., rotary_dim // 2 :], head[..., : rotary_dim // 2]], -1)
    ty = torch.cat([head * tc + turned * ts, rest], -1)
    close(y, ty.detach().numpy())
    (ty * t(dy)).sum().backward()
    close(C.rotary_backward(dy, cos, sin, adjacent), tx.grad.numpy())


def test_grouped_keys_and_values_are_shared_by_consecutive_query_heads():
    k = RNG.standard_normal((2, 3, 5, 4))  # (B, Hkv, T, dh)
    full = C.repeat_kv(k, 2)
    assert full.shape == (2, 6, 5, 4)
    for h in range(6):
        np.testing.assert_array_equal(full[:, h], k[:, h // 2])
    dfull = RNG.standard_normal(full.shape)
    tk = t(k)
    (tk.repeat_interleave(2, 1) * torch.tensor(dfull)).sum().backward()
    close(C.repeat_kv_backward(dfull, 2), tk.grad.numpy())


@pytest.mark.parametrize("act_fn", ["silu", "gelu", "gelu_erf", "relu"])
@pytest.mark.parametrize("lead, wlead", [((), ()), ((3,), (3,)), ((4, 2), ())])
def test_gated_mlp_and_its_backward_are_autograds(act_fn, lead, wlead):
    d, m = 4, 7
    x = RNG.standard_normal((*lead, 5, d)) * 2
    W_gate, W_in = RNG.standard_normal((2, *wlead, d, m))
    W_out = RNG.standard_normal((*wlead, m, d))
    b_in, b_out = RNG.standard_normal((*wlead, 1, m)), RNG.standard_normal((*wlead, 1, d))
    seen = []
    out, saved = C.gated_mlp(
        x, W_gate, W_in, b_in, W_out, b_out, act_fn, lambda n, a: seen.append(n) or a
    )
    assert seen == ["hook_pre", "hook_pre_linear", "hook_post"]
    act = {
        "relu": torch.relu,
        "silu": torch.nn.functional.silu,
        "gelu": lambda u: torch.nn.functional.gelu(u, approximate="tanh"),
        "gelu_erf": torch.nn.functional.gelu,
    }[act_fn]
    tensors = [t(a) for a in (x, W_gate, W_in, b_in, W_out, b_out)]
    tx, tW_gate, tW_in, tb_in, tW_out, tb_out = tensors
    tout = (act(tx @ tW_gate) * (tx @ tW_in) + tb_in) @ tW_out + tb_out
    close(out, tout.detach().numpy())
    dout = RNG.standard_normal(out.shape)
    dx, weight_grads = C.gated_mlp_backward(
        dout, x, W_gate, W_in, b_in, W_out, b_out, act_fn, saved
    )
    (tout * t(dout)).sum().backward()
    for got, want in zip((dx, *weight_grads), tensors):
        assert got.shape == want.shape
        close(got, want.grad.numpy())


@pytest.mark.parametrize("lead, wlead", [((), ()), ((3,), (3,)), ((4, 2), ())])
def test_solu_mlp_and_its_backward_are_autograds(lead, wlead):
    d, m = 4, 7
    x = RNG.standard_normal((*lead, 5, d)) * 2
    W_in, W_out = RNG.standard_normal((*wlead, d, m)), RNG.standard_normal((*wlead, m, d))
    b_in, ln_w, ln_b = RNG.standard_normal((3, *wlead, 1, m))
    b_out = RNG.standard_normal((*wlead, 1, d))
    seen = []
    out, saved = C.solu_mlp(
        x, W_in, b_in, ln_w, ln_b, W_out, b_out, 1e-5, lambda n, a: seen.append(n) or a
    )
    assert seen == ["hook_pre", "hook_mid", "ln.hook_scale", "ln.hook_normalized", "hook_post"]
    tensors = [t(a) for a in (x, W_in, b_in, ln_w, ln_b, W_out, b_out)]
    tx, tW_in, tb_in, tln_w, tln_b, tW_out, tb_out = tensors
    pre = tx @ tW_in + tb_in
    mid = pre * pre.softmax(-1)
    tout = (torch.nn.functional.layer_norm(mid, (m,), eps=1e-5) * tln_w + tln_b) @ tW_out + tb_out
    close(out, tout.detach().numpy())
    dout = RNG.standard_normal(out.shape)
    dx, weight_grads = C.solu_mlp_backward(dout, x, W_in, b_in, ln_w, ln_b, W_out, b_out, saved)
    (tout * t(dout)).sum().backward()
    for got, want in zip((dx, *weight_grads), tensors):
        assert got.shape == want.shape
        close(got, want.grad.numpy())


def test_silu_is_finite_far_out():
    x = np.array([-800.0, -40.0, 0.0, 40.0, 800.0])
    post, sig = C.silu(x)
    np.testing.assert_allclose(post, [0.0, -40 / (1 + math.exp(40)), 0.0, 40.0, 800.0])
    assert np.isfinite(C.silu_backward(np.ones_like(x), x, sig)).all()


# ---- the model composed of them --------------------------------------------------------------


def test_logits_and_gradients_equal_the_torch_bridges(arch):
    params, tokens, targets, weights = random_batch(arch)
    logits, cache = forward(params, tokens)
    loss, dlogits = cross_entropy(logits, targets, weights)
    grads = backward(params, cache, dlogits)
    for s in range(params.n_seeds):
        oracle = TorchTransformer(arch, params.seed(s))
        t_logits = oracle(torch.tensor(tokens[s]))
        close(logits[s], t_logits.detach().numpy(), 1e-12)
        nll = torch.nn.functional.cross_entropy(
            t_logits.reshape(-1, arch.vocab_out),
            torch.tensor(targets[s]).reshape(-1),
            reduction="none",
        )
        w = torch.tensor(weights[s].reshape(-1))
        t_loss = (nll * w).sum() / w.sum()
        assert abs(t_loss.item() - loss[s]) < 1e-12
        t_loss.backward()
        for name in arch.param_shapes():
            close(grads[name][s], oracle.p(name).grad.numpy(), 1e-10)


def test_every_hook_equals_the_torch_bridges_in_transformer_lens_order(arch):
    params, tokens, _, _ = random_batch(arch, S=1)
    _, cache = Transformer(arch, params.seed(0)).run_with_cache(tokens[0])
    _, t_cache = TorchTransformer(arch, params.seed(0)).run_with_cache(torch.tensor(tokens[0]))
    assert list(cache) == list(t_cache) == hook_names(arch)
    for name in cache:
        close(cache[name], np.asarray(t_cache[name].detach()), 1e-12)


def test_reading_only_some_positions_gives_the_full_gradients(arch):
    params, tokens, targets, weights = random_batch(arch)
    read = np.array([1, 4, 6])
    weights[..., np.setdiff1d(np.arange(arch.n_ctx), read)] = 0.0
    logits, cache = forward(params, tokens)
    grads = backward(params, cache, cross_entropy(logits, targets, weights)[1])
    some, cache = forward(params, tokens, read=read)
    some_grads = backward(
        params, cache, cross_entropy(some, targets[..., read], weights[..., read])[1]
    )
    np.testing.assert_allclose(some, logits[:, :, read], rtol=1e-12)
    scale = np.abs(grads.flat).max()
    for name in arch.param_shapes():
        np.testing.assert_allclose(
            some_grads[name], grads[name], rtol=0, atol=1e-12 * scale, err_msg=name
        )


def test_a_local_layer_reads_only_its_window():
    cfg = ModelConfig(**{**BASE, **ARCHITECTURES["gpt-neo"]})
    params, tokens, _, _ = random_batch(cfg, S=1)
    _, cache = Transformer(cfg, params.seed(0)).run_with_cache(tokens[0])
    T = cfg.n_ctx
    distance = np.arange(T)[:, None] - np.arange(T)[None, :]
    local = cache["blocks.1.attn.hook_pattern"]  # (B, H, T, T)
    assert (local[..., (distance < 0) | (distance >= 3)] == 0).all()
    assert (local[..., (distance >= 0) & (distance < 3)] > 0).all()
    assert (cache["blocks.0.attn.hook_pattern"][..., distance >= 3] > 0).all()  # global
    saved = cfg.to_dict()
    assert saved["attn_types"] == ["global", "local"]
    assert ModelConfig.from_dict(saved) == cfg and "attn_types" not in ModelConfig(**BASE).to_dict()


def test_central_differences_agree_with_the_backward_pass():
    cfg = ModelConfig(**{**BASE, **ARCHITECTURES["llama"]})
    worst = gradcheck(cfg.replace(n_ctx=4), entries=3)
    assert max(worst.values()) < THRESHOLD, worst


def test_hook_names_follow_transformer_lens():
    names = hook_names(ModelConfig(**{**BASE, "n_layers": 1, **ARCHITECTURES["pythia"]}))
    assert "hook_pos_embed" not in names and "blocks.0.hook_resid_mid" not in names
    assert names[names.index("blocks.0.attn.hook_v") :][:3] == [
        "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_rot_q",
        "blocks.0.attn.hook_rot_k",
    ]
    gated = hook_names(ModelConfig(**{**BASE, **ARCHITECTURES["llama"]}))
    assert [n for n in gated if n.startswith("blocks.0.mlp.")] == [
        "blocks.0.mlp.hook_pre",
        "blocks.0.mlp.hook_pre_linear",
        "blocks.0.mlp.hook_post",
    ]


def test_parameters_are_named_as_transformer_lens_names_them():
    shapes = ModelConfig(**{**BASE, **ARCHITECTURES["llama"]}).param_shapes()
    assert "pos_embed.W_pos" not in shapes and "blocks.0.ln1.b" not in shapes
    assert shapes["blocks.0.attn.W_Q"] == (4, 16, 4)
    assert shapes["blocks.0.attn._W_K"] == shapes["blocks.0.attn._W_V"] == (2, 16, 4)
    assert shapes["blocks.0.mlp.W_gate"] == shapes["blocks.0.mlp.W_in"] == (16, 24)


def test_the_classic_config_and_its_file_are_unchanged():
    cfg = ModelConfig(**BASE)
    for field in ARCHITECTURES["llama"]:
        if field not in ("attn_out", "unembed_bias", "ln_final", "act_fn", "normalization"):
            assert field not in cfg.to_dict()
    new = ModelConfig(**{**BASE, **ARCHITECTURES["qwen"]})
    assert ModelConfig.from_dict(new.to_dict()) == new
    assert new.to_dict()["rotary_base"] == 1e6 and new.newer_features()
    assert ModelConfig(**BASE).newer_features() == []


def test_the_compiled_engine_leaves_these_to_the_reference(arch):
    assert not select.covers(arch, "float64")
    assert select.choose(arch, None, "auto") is select.NUMPY
    with pytest.raises(FlatformerError, match="does not cover"):
        select.choose(arch, None, "numba")


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(n_key_value_heads=3), "multiple of n_key_value_heads"),
        (dict(positional_embedding_type="alibi"), "positional_embedding_type"),
        (dict(rotary_dim=3), "even"),
        (dict(rotary_dim=6), "rotary_dim"),
        (dict(eps=0.0), "eps"),
        (dict(normalization="rms"), "normalization"),
        (dict(act_fn="swish"), "act_fn"),
        (dict(gated_mlp="yes"), "true or false"),
        (dict(attn_types=["local", "global"]), "window_size"),
        (dict(attn_types=["global"], window_size=2), "names 1 layers"),
        (dict(attn_types=["global", "sliding"], window_size=2), "global or local"),
    ],
)
def test_config_refuses_what_it_cannot_compute(bad, message):
    with pytest.raises(FlatformerError, match=message):
        ModelConfig(**{**BASE, **bad})


def test_float32_stays_float32_and_near_float64(arch):
    from flatformer.engine.params import Params

    params, tokens, targets, weights = random_batch(arch)
    p32 = Params(arch, params.n_seeds, params.flat.astype(np.float32))
    logits, cache = forward(p32, tokens)
    grads = backward(p32, cache, cross_entropy(logits, targets, weights)[1])
    assert logits.dtype == grads.flat.dtype == np.float32
    assert all(v.dtype != np.float64 for v in cache.values() if isinstance(v, np.ndarray))
    assert np.abs(logits - forward(params, tokens)[0]).max() < 1e-5


def test_switching_off_positions_a_rotary_model_lacks_is_refused_by_name():
    from conftest import random_model

    from flatformer.errors import FlatformerError
    from flatformer.readout.knobs import positions_off

    cfg = ModelConfig(
        d_model=8, n_heads=2, d_head=4, d_mlp=16, n_ctx=6, d_vocab=5,
        positional_embedding_type="rotary",
    )  # fmt: skip
    model = random_model(cfg)
    with pytest.raises(FlatformerError, match="no position embedding to switch off .*rotary"):
        model([1, 2, 3], hooks=positions_off())


@pytest.mark.parametrize("name", ["shortformer", "shortformer-mlp"])
def test_switching_shortformer_positions_off_reaches_q_and_k(name):
    """hook_pos_embed is what q and k add (TransformerLens passes the hooked positions to its
    blocks): zeroing it changes the logits, as in the torch bridge."""
    cfg = ModelConfig(**{**BASE, **ARCHITECTURES[name]})
    params, tokens, _, _ = random_batch(cfg, S=1)
    model = Transformer(cfg, params.seed(0))
    off = {"hook_pos_embed": lambda p, name: np.zeros_like(p)}
    ours = model(tokens[0], hooks=off)
    oracle = TorchTransformer(cfg, params.seed(0))
    theirs = oracle(torch.tensor(tokens[0]), hooks={"hook_pos_embed": lambda p, name: 0 * p})
    close(ours, theirs.detach().numpy(), 1e-12)
    assert np.abs(ours - model(tokens[0])).max() > 1e-3
