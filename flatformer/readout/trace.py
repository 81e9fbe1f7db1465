"""Every named activation of one sequence, block by block (TransformerLens shapes without the
batch axis)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.transformer import Transformer
from .points import every_head, point_label, qk_hooks, stream_positions
from .probs import softmax


@dataclass
class BlockTrace:
    """One block's activations for one sequence."""

    resid_pre: np.ndarray  # (T, d)
    q: np.ndarray  # (T, H, dh), rotated with rotary positions (what attention multiplies)
    k: np.ndarray  # keys and values for each query head (its group's, when grouped)
    v: np.ndarray
    scores: np.ndarray  # (H, T, T), -inf above the diagonal
    pattern: np.ndarray  # (H, T, T)
    z: np.ndarray  # (T, H, dh) = pattern @ v
    attn_out: np.ndarray  # (T, d)
    resid_mid: np.ndarray  # (T, d) = resid_pre + attn_out (a parallel block's MLP reads
    #   resid_pre instead: there this sum is no hook, the stream never holds it)
    mlp_out: np.ndarray  # (T, d)
    resid_post: np.ndarray  # (T, d) = resid_mid + mlp_out


@dataclass
class Trace:
    """Every activation of one sequence: e = x + p, then per block z = e + Attn(e),
    h = z + FFN(z), then logits and probabilities."""

    tokens: np.ndarray  # (T,)
    labels: list[str]  # point labels, e.g. ["41", "12", "+2", ...]
    token_text: list[str]
    embed: np.ndarray  # (T, d) x
    pos_embed: np.ndarray  # (T, d) p, zero where positions do not enter the stream
    blocks: list[BlockTrace]
    logits: np.ndarray  # (T, V)
    probs: np.ndarray  # (T, V)
    cache: dict = field(repr=False, default_factory=dict)

    @property
    def e(self) -> np.ndarray:
        return self.embed + self.pos_embed


def trace(model: Transformer, tokens, vocab: list[str]) -> Trace:
    """Run one sequence and keep its named activations (raises FlatformerError on bad tokens)."""
    tokens = model.check_tokens(tokens)[0]
    logits, cache = model.run_with_cache(tokens)
    c = {name: act[0] for name, act in cache.items()}
    cfg, blocks = model.cfg, []
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."
        q_name, k_name = qk_hooks(cfg, layer)
        blocks.append(
            BlockTrace(
                c[b + "hook_resid_pre"],
                c[q_name],
                every_head(cfg, c[k_name]),
                every_head(cfg, c[b + "attn.hook_v"]),
                c[b + "attn.hook_attn_scores"],
                c[b + "attn.hook_pattern"],
                c[b + "attn.hook_z"],
                c[b + "hook_attn_out"],
                *after_attention(model.cfg, c, b),
                c[b + "hook_resid_post"],
            )
        )
    text = [vocab[t] for t in tokens]
    return Trace(
        tokens,
        [point_label(w, i) for i, w in enumerate(text)],
        text,
        c["hook_embed"],
        stream_positions(cfg, c),
        blocks,
        logits[0],
        softmax(logits[0]),
        c,
    )


def after_attention(cfg, c: dict, b: str):
    """(resid_mid, mlp_out) of block `b` in a cache `c`: an attention-only block's stream after
    attention is its output, and its MLP writes zero; a parallel block's e + Attn(e) is the sum
    of its hooks (its MLP reads e)."""
    if cfg.attn_only:
        return c[b + "hook_resid_post"], np.zeros_like(c[b + "hook_resid_post"])
    if cfg.parallel_attn_mlp:
        return c[b + "hook_resid_pre"] + c[b + "hook_attn_out"], c[b + "hook_mlp_out"]
    return c[b + "hook_resid_mid"], c[b + "hook_mlp_out"]
