"""Every named activation of one sequence, block by block (TransformerLens shapes without the
batch axis)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.transformer import Transformer
from .points import point_label
from .probs import softmax


@dataclass
class BlockTrace:
    """One block's activations for one sequence."""

    resid_pre: np.ndarray  # (T, d)
    q: np.ndarray  # (T, H, dh)
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray  # (H, T, T), -inf above the diagonal
    pattern: np.ndarray  # (H, T, T)
    z: np.ndarray  # (T, H, dh) = pattern @ v
    attn_out: np.ndarray  # (T, d)
    resid_mid: np.ndarray  # (T, d) = resid_pre + attn_out
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
    pos_embed: np.ndarray  # (T, d) p
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
    blocks = []
    for layer in range(model.cfg.n_layers):
        b = f"blocks.{layer}."
        blocks.append(
            BlockTrace(
                c[b + "hook_resid_pre"],
                c[b + "attn.hook_q"],
                c[b + "attn.hook_k"],
                c[b + "attn.hook_v"],
                c[b + "attn.hook_attn_scores"],
                c[b + "attn.hook_pattern"],
                c[b + "attn.hook_z"],
                c[b + "hook_attn_out"],
                *_after_attention(model.cfg, c, b),
                c[b + "hook_resid_post"],
            )
        )
    text = [vocab[t] for t in tokens]
    return Trace(
        tokens,
        [point_label(w, i) for i, w in enumerate(text)],
        text,
        c["hook_embed"],
        c["hook_pos_embed"],
        blocks,
        logits[0],
        softmax(logits[0]),
        c,
    )


def _after_attention(cfg, c: dict, b: str):
    """(resid_mid, mlp_out) of block `b`: an attention-only block's stream after attention is
    its output, and its MLP writes zero."""
    if cfg.attn_only:
        return c[b + "hook_resid_post"], np.zeros_like(c[b + "hook_resid_post"])
    return c[b + "hook_resid_mid"], c[b + "hook_mlp_out"]
