"""Bridges to the PyTorch ecosystem: the same model as a `torch.nn.Module` or a TransformerLens
`HookedTransformer`. PyTorch is optional: `pip install flatformer[torch]`.

`TorchTransformer` is written independently of the NumPy engine, with autograd doing the backward
pass, so the tests also use it as the oracle for the engine's hand-written gradients.
"""

from __future__ import annotations

import math

import numpy as np

from .config import ModelConfig
from .errors import FlatformerError

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
            self.params = nn.ParameterDict({
                name.replace(".", "__"): nn.Parameter(torch.tensor(np.asarray(tensors[name]),
                                                                   dtype=dtype))
                for name in cfg.param_shapes()})
            from .model import hook_names
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
            x = x - x.mean(-1, keepdim=True)
            scale = self.hook(name + ".hook_scale", (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt(), ctx)
            return self.hook(name + ".hook_normalized", x / scale * w + b, ctx)

        def forward(self, tokens, hooks=None, cache=None):
            """Logits (B, T, V) for integer tokens (B, T); fills `cache` with named activations."""
            cfg = self.cfg
            ctx = {"hooks": hooks or {}, "cache": {} if cache is None else cache}
            T = tokens.shape[-1]
            x = self.hook("hook_embed", self.p("embed.W_E")[tokens], ctx)
            pos = self.p("pos_embed.W_pos")[:T].expand(tokens.shape[0], T, cfg.d_model)
            resid = x + self.hook("hook_pos_embed", pos, ctx)
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            for layer in range(cfg.n_layers):
                b = f"blocks.{layer}."
                resid = self.hook(b + "hook_resid_pre", resid, ctx)
                h = resid
                if cfg.normalization == "pre_ln":
                    h = self.layer_norm(h, self.p(b + "ln1.w"), self.p(b + "ln1.b"), b + "ln1", ctx)
                qkv = []
                for w in "QKV":
                    out = torch.einsum("btd,hde->bthe", h, self.p(b + f"attn.W_{w}"))
                    if cfg.qkv_bias:
                        out = out + self.p(b + f"attn.b_{w}")
                    qkv.append(self.hook(b + f"attn.hook_{w.lower()}", out, ctx))
                q, k, v = qkv
                scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(cfg.d_head)
                scores = self.hook(b + "attn.hook_attn_scores",
                                   scores.masked_fill(~mask, float("-inf")), ctx)
                pattern = self.hook(b + "attn.hook_pattern", scores.softmax(-1), ctx)
                z = self.hook(b + "attn.hook_z", torch.einsum("bhqk,bkhe->bqhe", pattern, v), ctx)
                if cfg.attn_out:
                    attn_out = torch.einsum("bqhe,hed->bqd", z, self.p(b + "attn.W_O"))
                else:
                    attn_out = z.flatten(-2)
                attn_out = self.hook(b + "hook_attn_out", attn_out, ctx)
                resid = self.hook(b + "hook_resid_mid", resid + attn_out, ctx)
                h = resid
                if cfg.normalization == "pre_ln":
                    h = self.layer_norm(h, self.p(b + "ln2.w"), self.p(b + "ln2.b"), b + "ln2", ctx)
                pre = self.hook(b + "mlp.hook_pre", h @ self.p(b + "mlp.W_in") + self.p(b + "mlp.b_in"), ctx)
                if cfg.act_fn == "relu":
                    post = torch.relu(pre)
                else:
                    post = nn.functional.gelu(pre, approximate="tanh")
                post = self.hook(b + "mlp.hook_post", post, ctx)
                mlp_out = self.hook(b + "hook_mlp_out",
                                    post @ self.p(b + "mlp.W_out") + self.p(b + "mlp.b_out"), ctx)
                resid = self.hook(b + "hook_resid_post", resid + mlp_out, ctx)
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
    from .runs import load_run
    run = load_run(run_or_model) if not hasattr(run_or_model, "model") else run_or_model
    return run.model(step)
