"""Edge ablation done the way TransformerLens users do it, by hooks on a PyTorch model: the
independent oracle for flatformer.edges.graph.

`run(tokens, hooks)` is any model that takes `{hook name: fn(activation, name)}` (our torch
bridge directly, TransformerLens's bridge through `tl_runner`). The hooks read each sender's
current output from the activations recorded so far in the same run, and replace each receiver's
input by the residual stream minus (1 - mask_e) * (output - ablated value) of every edge e into
it (the stream is the sum of the outputs recorded so far): q, k, v of every head are recomputed
from that input (through LayerNorm if any), the MLP's pre-activation likewise, and the stream
the unembedding reads (the model applies its final LayerNorm, if any, after that). `mask` is a torch tensor, so
autograd gives d metric / d mask.
"""

import numpy as np
import torch

from flatformer.config import attn_weight


def tl_runner(bridge):
    """TransformerLens's bridge as a `run(tokens, hooks)`."""

    def run(tokens, hooks):
        fwd = [
            (name, (lambda f: lambda act, hook: f(act, hook.name))(fn))
            for name, fn in hooks.items()
        ]
        return bridge.run_with_hooks(tokens, fwd_hooks=fwd)

    return run


def hooked_edge_logits(run, graph, tokens, refs, mask):
    """Logits (B, T, V) of the model `run` with edge mask `mask` (n_edges,) applied by hooks."""
    cfg, t = graph.cfg, {k: torch.tensor(v) for k, v in graph.t.items()}
    B, T = tokens.shape
    d, dh = cfg.d_model, cfg.d_head
    ref = {s: torch.tensor(np.broadcast_to(r, (B, T, d)).copy()) for s, r in refs.items()}
    seen = {}

    def record(x, name):
        seen[name] = x
        return x

    def output(s):
        if s in ("tok", "pos"):
            return seen["hook_embed" if s == "tok" else "hook_pos_embed"]
        L = int(s[1:].split(".")[0])
        if s.startswith("m"):
            return seen[f"blocks.{L}.hook_mlp_out"]
        h = int(s.split(".")[1])
        z = seen[f"blocks.{L}.attn.hook_z"][:, :, h]
        if cfg.attn_out:
            return z @ t[f"blocks.{L}.attn.W_O"][h]
        return torch.nn.functional.pad(z, (h * dh, d - (h + 1) * dh))

    def read(r):
        """The stream at receiver r: every sender before it, ablated edges swapped out."""
        x = 0
        # b_O (imported models) of every attention layer the receiver reads after, never ablated
        node = graph.node_of(r)
        after_heads = node[0] == "m" and not cfg.parallel_attn_mlp  # a parallel MLP reads e
        after = cfg.n_layers if node == "logits" else int(node[1:].split(".")[0]) + after_heads
        for L in range(after):
            if f"blocks.{L}.attn.b_O" in t:
                x = x + t[f"blocks.{L}.attn.b_O"]
        for e, s in graph.into[r]:
            x = x + output(s) - (1 - mask[e]) * (output(s) - ref[s])
        return x

    def ln(x, name):
        if cfg.normalization == "none":
            return x
        if cfg.normalization == "pre_rms":
            return x / (x.pow(2).mean(-1, keepdim=True) + cfg.eps).sqrt() * t[name + ".w"]
        x = x - x.mean(-1, keepdim=True)
        scale = (x.pow(2).mean(-1, keepdim=True) + cfg.eps).sqrt()
        return x / scale * t[name + ".w"] + t[name + ".b"]

    group = cfg.n_heads // cfg.n_kv_heads

    def qkv_hook(L, kind):
        """q, k or v from each head's own receiver (the model rotates q and k after this hook).
        Grouped keys and values are one per group: the group's first head's receiver."""

        def hook(x, name):
            heads = []
            w = kind.upper()
            for h in range(0, cfg.n_heads, 1 if kind == "q" else group):
                i = h if kind == "q" else h // group
                y = ln(read(f"a{L}.{h}.{kind}"), f"blocks.{L}.ln1")
                if cfg.shortformer and kind in "qk":
                    y = y + seen["hook_pos_embed"]
                y = y @ t[f"blocks.{L}.{attn_weight(cfg, w)}"][i]
                if cfg.qkv_bias:
                    y = y + t[f"blocks.{L}.{attn_weight(cfg, w, 'b')}"][i]
                heads.append(y)
            return torch.stack(heads, 2)

        return hook

    def mlp_hook(L, weight, bias=True):
        def hook(x, name):
            x = ln(read(f"m{L}"), f"blocks.{L}.ln2") @ t[f"blocks.{L}.mlp.{weight}"]
            return x + t[f"blocks.{L}.mlp.b_in"] if bias else x

        return hook

    last = f"blocks.{cfg.n_layers - 1}.hook_resid_post"
    hooks = {"hook_embed": record}
    if not cfg.rotary:
        hooks["hook_pos_embed"] = record
    for L in range(cfg.n_layers):
        b = f"blocks.{L}."
        hooks[b + "attn.hook_z"] = record
        for kind in "qkv":
            hooks[b + f"attn.hook_{kind}"] = qkv_hook(L, kind)
        if graph.mlp[L]:
            hooks[b + "hook_mlp_out"] = record
            if cfg.gated_mlp:  # act(x W_gate) * (x W_in) + b_in
                hooks[b + "mlp.hook_pre"] = mlp_hook(L, "W_gate", bias=False)
                hooks[b + "mlp.hook_pre_linear"] = mlp_hook(L, "W_in", bias=False)
            else:
                hooks[b + "mlp.hook_pre"] = mlp_hook(L, "W_in")
    hooks[last] = lambda x, name: read("logits")
    return run(torch.tensor(tokens), hooks)
