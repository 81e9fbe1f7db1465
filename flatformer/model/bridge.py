"""Bridges to the PyTorch ecosystem: the same model as a `torch.nn.Module` or a TransformerLens
`HookedTransformer`. PyTorch is optional: `pip install flatformer[torch]`.

`TorchTransformer` is written independently of the NumPy engine, with autograd doing the backward
pass, so the tests also use it as the oracle for the engine's hand-written gradients.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..config import ModelConfig, attn_weight
from ..errors import FlatformerError

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the extra
    torch = None
    nn = None


def _require_torch():
    if torch is None:
        raise FlatformerError("PyTorch is not installed: pip install 'flatformer[torch]'")


if torch is not None:

    class HookPoint(nn.Module):
        """An identity module whose output is recorded and may be replaced by a hook."""

        def __init__(self):
            super().__init__()
            self.name = ""

        def forward(self, x, ctx):
            fn = ctx["hooks"].get(self.name)
            if fn is not None:
                x = fn(x, self.name)
            ctx["cache"][self.name] = x
            return x

    class TorchTransformer(nn.Module):
        """The flatformer transformer in PyTorch, with parameters named like the engine's."""

        def __init__(self, cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype=torch.float64):
            super().__init__()
            self.cfg = cfg
            self.params = nn.ParameterDict(
                {
                    name.replace(".", "__"): nn.Parameter(
                        torch.tensor(np.asarray(tensors[name]), dtype=dtype)
                    )
                    for name in cfg.param_shapes()
                }
            )
            from ..engine.model import hook_names

            self.hook_points = nn.ModuleDict()
            for name in hook_names(cfg):
                point = HookPoint()
                point.name = name
                self.hook_points[name.replace(".", "__")] = point

        def p(self, name):
            return self.params[name.replace(".", "__")]

        def hook(self, name, x, ctx):
            return self.hook_points[name.replace(".", "__")](x, ctx)

        def layer_norm(self, x, w, b, name, ctx):
            if self.cfg.norm_kind == "rms":  # RMSNorm: no centring, no bias
                return self.rms_norm(x, w, name, ctx)
            x = x - x.mean(-1, keepdim=True)
            scale = self.hook(
                name + ".hook_scale", (x.pow(2).mean(-1, keepdim=True) + self.cfg.eps).sqrt(), ctx
            )
            return self.hook(name + ".hook_normalized", x / scale * w + b, ctx)

        def rms_norm(self, x, w, name, ctx):
            scale = (x.pow(2).mean(-1, keepdim=True) + self.cfg.eps).sqrt()
            scale = self.hook(name + ".hook_scale", scale, ctx)
            return self.hook(name + ".hook_normalized", x / scale * w, ctx)

        def norm(self, x, name, ctx):
            b = self.p(name + ".b") if self.cfg.norm_kind == "ln" else None
            return self.layer_norm(x, self.p(name + ".w"), b, name, ctx)

        def rope(self, x, T):
            """x (B, T, heads, dh) with its first rotary_dim dimensions turned by position."""
            cfg = self.cfg
            r = cfg.rotated_dims
            freq = cfg.rotary_base ** (-torch.arange(0, r, 2, dtype=x.dtype) / r)
            angle = torch.arange(T, dtype=x.dtype)[:, None] * freq  # (T, r/2)
            head, rest = x[..., :r], x[..., r:]
            if cfg.rotary_adjacent_pairs:  # GPT-J: pairs (2i, 2i + 1)
                pairs = head.unflatten(-1, (r // 2, 2))
                c, s = angle.cos()[:, None, :, None], angle.sin()[:, None, :, None]
                x1, x2 = pairs[..., :1], pairs[..., 1:]
                turned = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
            else:  # GPT-NeoX, Llama: pairs (i, i + r/2)
                c, s = angle.cos()[:, None], angle.sin()[:, None]
                x1, x2 = head[..., : r // 2], head[..., r // 2 :]
                turned = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
            return torch.cat([turned, rest], -1)

        def activation(self, pre):
            act_fn = self.cfg.act_fn
            if act_fn == "relu":
                return torch.relu(pre)
            if act_fn == "silu":
                return nn.functional.silu(pre)
            if act_fn == "solu_ln":  # the SoLU MLP computes its own (forward)
                return pre
            if act_fn == "gelu_erf":
                return nn.functional.gelu(pre)
            return nn.functional.gelu(pre, approximate="tanh")

        def forward(self, tokens, hooks=None, cache=None):
            """Logits (B, T, V) for integer tokens (B, T); fills `cache` with named activations."""
            cfg = self.cfg
            ctx = {"hooks": hooks or {}, "cache": {} if cache is None else cache}
            T = tokens.shape[-1]
            x = self.hook("hook_embed", self.p("embed.W_E")[tokens], ctx)
            if cfg.rotary:
                resid = x
            else:
                pos = self.p("pos_embed.W_pos")[:T].expand(tokens.shape[0], T, cfg.d_model)
                pos = self.hook("hook_pos_embed", pos, ctx)
                resid = x if cfg.shortformer else x + pos
            causal = torch.ones(T, T, dtype=torch.bool)
            if cfg.causal:
                causal = causal.tril()
            for layer in range(cfg.n_layers):
                b = f"blocks.{layer}."
                mask = causal
                if cfg.window(layer):  # GPT-Neo's local layers: keys within the window only
                    mask = causal & ~torch.tril(causal, -cfg.window(layer))
                resid = self.hook(b + "hook_resid_pre", resid, ctx)
                h = resid
                if cfg.pre_norm:
                    h = self.norm(h, b + "ln1", ctx)
                qkv = []
                for w in "QKV":
                    inp = h + pos if cfg.shortformer and w in "QK" else h  # Shortformer: q, k only
                    out = torch.einsum("btd,hde->bthe", inp, self.p(b + attn_weight(cfg, w)))
                    if cfg.qkv_bias:
                        out = out + self.p(b + attn_weight(cfg, w, "b"))
                    qkv.append(self.hook(b + f"attn.hook_{w.lower()}", out, ctx))
                q, k, v = qkv
                if cfg.rotary:
                    q = self.hook(b + "attn.hook_rot_q", self.rope(q, T), ctx)
                    k = self.hook(b + "attn.hook_rot_k", self.rope(k, T), ctx)
                group = cfg.n_heads // cfg.n_kv_heads  # query heads per key and value head
                k, v = k.repeat_interleave(group, -2), v.repeat_interleave(group, -2)
                scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(cfg.d_head)
                scores = self.hook(
                    b + "attn.hook_attn_scores", scores.masked_fill(~mask, float("-inf")), ctx
                )
                pattern = scores.softmax(-1)
                if cfg.attn_coeff != 1.0:  # Zhong et al.'s attention rate (components.attention)
                    pattern = cfg.attn_coeff * pattern + (1.0 - cfg.attn_coeff) * mask.to(
                        pattern.dtype
                    )
                pattern = self.hook(b + "attn.hook_pattern", pattern, ctx)
                z = self.hook(b + "attn.hook_z", torch.einsum("bhqk,bkhe->bqhe", pattern, v), ctx)
                if cfg.attn_out:
                    attn_out = torch.einsum("bqhe,hed->bqd", z, self.p(b + "attn.W_O"))
                else:
                    attn_out = z.flatten(-2)
                if cfg.attn_out_bias:
                    attn_out = attn_out + self.p(b + "attn.b_O")
                attn_out = self.hook(b + "hook_attn_out", attn_out, ctx)
                if cfg.attn_only:
                    resid = self.hook(b + "hook_resid_post", resid + attn_out, ctx)
                    continue
                if cfg.parallel_attn_mlp:
                    h, resid = resid, resid + attn_out
                else:
                    resid = h = self.hook(b + "hook_resid_mid", resid + attn_out, ctx)
                if cfg.pre_norm:
                    h = self.norm(h, b + "ln2", ctx)
                if cfg.gated_mlp:
                    gate = self.hook(b + "mlp.hook_pre", h @ self.p(b + "mlp.W_gate"), ctx)
                    lin = self.hook(b + "mlp.hook_pre_linear", h @ self.p(b + "mlp.W_in"), ctx)
                    post = self.activation(gate) * lin + self.p(b + "mlp.b_in")
                else:
                    pre = h @ self.p(b + "mlp.W_in") + self.p(b + "mlp.b_in")
                    pre = self.hook(b + "mlp.hook_pre", pre, ctx)  # SoLU reads the hooked pre too
                    post = self.activation(pre)
                if cfg.act_fn == "solu_ln":  # SoLU, then a LayerNorm over the neurons
                    mid = self.hook(b + "mlp.hook_mid", pre * pre.softmax(-1), ctx)
                    centred = mid - mid.mean(-1, keepdim=True)
                    scale = (centred.pow(2).mean(-1, keepdim=True) + cfg.eps).sqrt()
                    scale = self.hook(b + "mlp.ln.hook_scale", scale, ctx)
                    ln = centred / scale * self.p(b + "mlp.ln.w") + self.p(b + "mlp.ln.b")
                    post = self.hook(b + "mlp.ln.hook_normalized", ln, ctx)
                post = self.hook(b + "mlp.hook_post", post, ctx)
                mlp_out = self.hook(
                    b + "hook_mlp_out",
                    post @ self.p(b + "mlp.W_out") + self.p(b + "mlp.b_out"),
                    ctx,
                )
                resid = self.hook(b + "hook_resid_post", resid + mlp_out, ctx)
            if cfg.ln_final:
                resid = self.norm(resid, "ln_final", ctx)
            logits = resid @ self.p("unembed.W_U")
            if cfg.unembed_bias:
                logits = logits + self.p("unembed.b_U")
            return logits

        def run_with_cache(self, tokens, hooks=None):
            cache = {}
            logits = self.forward(tokens, hooks=hooks, cache=cache)
            return logits, cache


def to_torch(run_or_model, step: int | None = None, dtype=None):
    """A `torch.nn.Module` with the run's weights (at `step`, default the last) and hook names."""
    _require_torch()
    model = _as_model(run_or_model, step)
    return TorchTransformer(model.cfg, model.tensors, dtype=dtype or torch.float64)


def _as_model(run_or_model, step):
    from .transformer import Transformer

    if isinstance(run_or_model, Transformer):
        return run_or_model
    from ..store.runs import load_run

    run = load_run(run_or_model) if not hasattr(run_or_model, "model") else run_or_model
    return run.model(step)


# Our activations by TransformerLens's names: our "gelu" is the tanh approximation (its
# gelu_new), our gelu_erf its exact "gelu".
TL_ACT_FNS = {
    "relu": "relu",
    "gelu": "gelu_new",
    "gelu_erf": "gelu",
    "silu": "silu",
    "solu_ln": "solu_ln",
}


def _as_flatformer_computes(net, cfg: ModelConfig, dtype):
    """TransformerLens 4's native model made to compute what the engine does where its defaults
    differ: the rotary tables in float64 from the engine's own (it bakes them in float32) and
    the engine's pairs (it always turns neighbours; Llama's and GPT-NeoX's halves are ours by
    default); GPT-Neo's local layers' masks; a gated MLP's b_in and b_out (it has none); a
    parallel block (it runs attention and the MLP one after the other); shortformer positions
    (it has only standard and rotary ones)."""
    from ..engine.components import local_bias, rotary_tables

    if cfg.rotary:
        cos, sin = rotary_tables(
            cfg.n_ctx, cfg.rotated_dims, float(cfg.rotary_base), cfg.rotary_adjacent_pairs
        )
        net.rotary.cos_cached = torch.tensor(cos, dtype=dtype)
        net.rotary.sin_cached = torch.tensor(sin, dtype=dtype)
        if not cfg.rotary_adjacent_pairs:
            net.rotary._rotate_half = _rotate_halves
    for layer, block in enumerate(net.layers):
        if cfg.window(layer):
            hidden = ~torch.tensor(np.isfinite(local_bias(cfg.n_ctx, cfg.window(layer))))
            block.attn.causal_mask = hidden
        if cfg.gated_mlp:
            block.mlp.b_in = nn.Parameter(torch.zeros(cfg.d_mlp, dtype=dtype))
            block.mlp.out = nn.Linear(cfg.d_mlp, cfg.d_model, bias=True, dtype=dtype)
            block.mlp.forward = _gated_forward.__get__(block.mlp)
        if cfg.parallel_attn_mlp:
            block.forward = _parallel_forward.__get__(block)
    if cfg.shortformer:  # W_pos read once a pass, then added to each block's q and k inputs
        shared: dict = {}
        net.forward = partial(_shortformer_forward, net, shared)
        for block in net.layers:
            block.attn.forward = partial(_shortformer_attention, block.attn, shared)


def _shortformer_forward(net, shared, input_ids, attention_mask=None, position_ids=None, **kw):
    """The native model's pass with shortformer positions: W_pos (its hook_pos_embed) kept
    aside for the attention of every block, the stream only the token embeddings."""
    hidden_states = net.tok_embed(input_ids)
    batch, seq = input_ids.shape
    if position_ids is None:
        position_ids = torch.arange(seq, device=input_ids.device).unsqueeze(0).expand(batch, -1)
    shared["p"] = net.pos(position_ids)
    for block in net.layers:
        (hidden_states,) = block(
            hidden_states, attention_mask=attention_mask, position_ids=position_ids
        )
    return net.head(net.ln_out(hidden_states))


def _shortformer_attention(attn, shared, hidden_states, pattern_fn=None, **kwargs):
    """Native attention with q and k read from LN1(x) + p and v from LN1(x)
    (TransformerLens's shortformer block): softmax(q k^T / sqrt(dh) + mask) v, then W_O."""
    batch, seq, _ = hidden_states.shape
    with_p = hidden_states + shared["p"]
    q = attn.q(with_p).view(batch, seq, attn.n_heads, attn.d_head).transpose(1, 2)
    k = attn.k(with_p).view(batch, seq, attn.n_kv_heads, attn.d_head).transpose(1, 2)
    v = attn.v(hidden_states).view(batch, seq, attn.n_kv_heads, attn.d_head).transpose(1, 2)
    if attn.kv_repeats > 1:
        k = k.repeat_interleave(attn.kv_repeats, dim=1)
        v = v.repeat_interleave(attn.kv_repeats, dim=1)
    hidden = attn.causal_mask[:seq, :seq] if attn.causal else torch.zeros(seq, seq, dtype=bool)
    scores = (q @ k.transpose(-2, -1) / attn.scale).masked_fill(hidden, float("-inf"))
    pattern = torch.softmax(scores, dim=-1)
    if pattern_fn is not None:
        pattern = pattern_fn(pattern)
    z = (pattern @ v).transpose(1, 2).reshape(batch, seq, -1)
    return attn.o(z), pattern


def _rotate_halves(x):
    """The quarter turn of rotary's halves (x1, x2) -> (-x2, x1), as components.rotate."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def _gated_forward(mlp, hidden_states, **kwargs):
    """act(x W_gate) * (x W_in) + b_in, then W_out and b_out (components.gated_mlp)."""
    post = mlp.act(mlp.gate(hidden_states)) * getattr(mlp, "in")(hidden_states) + mlp.b_in
    return mlp.out(post)


def _parallel_forward(block, hidden_states, attention_mask=None, position_ids=None, **kwargs):
    """h = e + Attn(LN1(e)) + FFN(LN2(e)): attention and the MLP both read the block's input."""
    attn_out, _ = block.attn(
        block.ln1(hidden_states), attention_mask=attention_mask, position_ids=position_ids
    )
    return (hidden_states + attn_out + block.mlp(block.ln2(hidden_states)),)


def to_transformer_lens(run_or_model, step: int | None = None):
    """A TransformerLens `TransformerBridge` (TransformerLens 4) with the run's weights, float64.

    TransformerLens 4 removed `HookedTransformer`; its successor is a `TransformerBridge` around
    TransformerLens's own native model, in compatibility mode (legacy hook names such as
    `blocks.0.attn.hook_pattern`). We load our weights without its weight processing (no LN
    folding, no centring), so every weight and activation is ours. Where our model lacks a piece
    TransformerLens always has: no W_O (heads concatenated) becomes W_O = identity blocks; missing
    biases (b_Q/b_K/b_V, b_O unless `attn_out_bias`, b_U) are zeros; attention-only blocks (d_mlp = 0) are its
    `attn_only`; and its final LayerNorm slot is an identity unless our model has `ln_final`
    (then it is our final LayerNorm, with its hook_scale and hook_normalized). Its attention masks with -inf and scales by 1/sqrt(d_head), like
    ours. Two activations differ in meaning: its `ln*.hook_normalized` is x_hat before the gain
    and bias (ours is x_hat * w + b), and TransformerLens 4.3's bridge records this model's
    `attn.hook_attn_scores` after the fact from what the attention module returns, which is the
    softmaxed pattern, so read pre-softmax scores from our engine. Its `set_use_attn_result` is
    not available for this architecture; `cache.stack_head_results()` gives per-head outputs.

    The newer architectures map to its config fields (`normalization_type` "RMS" with
    `final_rms`, `positional_embedding_type` "rotary" with `rotary_dim`, `rotary_base` and
    `rotary_adjacent_pairs`, `gated_mlp`, `parallel_attn_mlp`, `n_key_value_heads`, `act_fn`
    "silu" and "solu_ln", `eps`), and its native model is made to compute what the engine
    does where it differs (`_as_flatformer_computes`: float64 rotary tables, our pairs, local
    layers' masks, a gated MLP's biases, parallel blocks; its norms computed by the bridge in
    float64; shortformer positions, which it would add to the stream, added to each block's q
    and k inputs). It has no `hook_rot_q`, `hook_rot_k` or SoLU `hook_mid`.
    """
    _require_torch()
    model = _as_model(run_or_model, step)
    cfg = model.cfg
    if cfg.attn_coeff != 1.0:
        raise FlatformerError(
            f"TransformerLens has no attention rate: this model mixes its attention with "
            f"uniform weights (attn_coeff {cfg.attn_coeff:g}); use to_torch instead"
        )
    try:
        from transformer_lens import TransformerBridgeConfig
        from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent
        from transformer_lens.model_bridge.generalized_components.normalization import (
            NormalizationBridge,
        )
        from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
        from transformer_lens.model_bridge.sources.native.model import NativeModel
        from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint
    except ImportError as exc:
        raise FlatformerError(
            f"to_transformer_lens needs TransformerLens 4 (TransformerBridge): "
            f"pip install 'transformer-lens>=4' ({exc})"
        ) from None
    dtype = torch.float64
    tl_cfg = TransformerBridgeConfig(
        d_model=cfg.d_model,
        d_head=cfg.d_head,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        d_mlp=cfg.d_mlp or None,
        attn_only=cfg.attn_only,
        n_ctx=cfg.n_ctx,
        d_vocab=cfg.d_vocab,
        d_vocab_out=cfg.vocab_out,
        # our "gelu" is the tanh approximation (its gelu_new); our gelu_erf is its exact "gelu"
        act_fn=TL_ACT_FNS[cfg.act_fn],
        normalization_type={"pre_ln": "LN", "pre_rms": "RMS"}.get(cfg.normalization),
        final_rms=cfg.ln_final and cfg.norm_kind == "rms",
        eps=cfg.eps,
        positional_embedding_type="rotary" if cfg.rotary else "standard",
        rotary_dim=cfg.rotated_dims,
        rotary_base=cfg.rotary_base,
        rotary_adjacent_pairs=cfg.rotary_adjacent_pairs,
        gated_mlp=cfg.gated_mlp,
        parallel_attn_mlp=cfg.parallel_attn_mlp,
        n_key_value_heads=cfg.n_kv_heads if cfg.grouped else None,
        attention_dir="causal" if cfg.causal else "bidirectional",
        architecture="TransformerLensNative",
        init_weights=False,
        dtype=dtype,
    )
    net = NativeModel(tl_cfg).to(dtype)
    # TransformerLens ties the final norm to the blocks' normalization_type; ours is separate.
    if not cfg.ln_final:
        net.ln_out = nn.Identity()
    elif cfg.normalization == "none":
        net.ln_out = nn.LayerNorm(cfg.d_model, eps=cfg.eps, dtype=dtype)
    _as_flatformer_computes(net, cfg, dtype)
    gated = [block.mlp.b_in for block in net.layers] if cfg.gated_mlp else []

    def final_norm(adapter):
        # Without ln_final a plain component passes the identity through (a LayerNorm bridge
        # would recompute LayerNorm itself); with it and no block norms, a LayerNorm bridge.
        if not cfg.ln_final:
            adapter.component_mapping["ln_final"] = GeneralizedComponent(
                name="ln_out", config=adapter.cfg
            )
        elif cfg.normalization == "none":
            adapter.component_mapping["ln_final"] = NormalizationBridge(
                name="ln_out", config=adapter.cfg, uses_rms_norm=False
            )

    bridge = build_bridge_from_module(
        net,
        "TransformerLensNative",
        tl_config=tl_cfg,
        dtype=dtype,
        model_name="flatformer",
        post_adapter_hook=final_norm,
    )
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    state = {name: torch.tensor(t, dtype=dtype) for name, t in model.tensors.items()}
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}.attn."
        if not cfg.attn_out:
            # Concatenating heads is multiplying by identity blocks: head h writes dims h*dh..
            state[b + "W_O"] = torch.eye(H * dh, dtype=dtype).reshape(H, dh, d)
        for w in "QKV":
            state.setdefault(
                "blocks." + str(layer) + "." + attn_weight(cfg, w, "b"),
                torch.zeros(cfg.heads_of(w), dh, dtype=dtype),
            )
        state.setdefault(b + "b_O", torch.zeros(d, dtype=dtype))
    state.setdefault("unembed.b_U", torch.zeros(cfg.vocab_out, dtype=dtype))
    for module in bridge.modules():  # its own RMSNorm computes in float32; the bridge's, ours
        if isinstance(module, NormalizationBridge):
            module.use_native_layernorm_autograd = False
    converted = convert_tl_checkpoint(state, bridge.cfg)
    # our gated b_in is added after the gate, not in x W_in: it goes to the slot made for it
    b_in = [converted.pop(f"blocks.{L}.mlp.in.bias") for L in range(cfg.n_layers) if gated]
    bridge.load_state_dict(converted, strict=True)
    with torch.no_grad():
        for slot, value in zip(gated, b_in):
            slot.copy_(value)
    bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    bridge.eval()
    return bridge
