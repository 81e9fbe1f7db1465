"""Which models the compiled path computes, and where each tensor lies in one seed's flat
parameter vector: the offsets every kernel reads its weights at."""

from __future__ import annotations

import dataclasses
import math
from collections import namedtuple
from functools import lru_cache

import numpy as np

try:
    import numba
except ImportError:  # the NumPy engine does everything without it
    numba = None

from ...config import ModelConfig
from ...errors import FlatformerError


# Where each parameter tensor starts in one seed's vector: the whole-model ones, then per layer.
GLOBAL = ("embed.W_E", "pos_embed.W_pos", "unembed.W_U", "unembed.b_U", "ln_final.w", "ln_final.b")
LAYER = (
    "ln1.w",
    "ln1.b",
    "attn.W_Q",
    "attn.W_K",
    "attn.W_V",
    "attn.b_Q",
    "attn.b_K",
    "attn.b_V",
    "attn.W_O",
    "ln2.w",
    "ln2.b",
    "mlp.W_in",
    "mlp.b_in",
    "mlp.W_out",
    "mlp.b_out",
)
(LN1W, LN1B, WQ, WK, WV, BQ, BK, BV, WO, LN2W, LN2B, WIN, BIN, WOUT, BOUT) = range(len(LAYER))

# What the kernels read of a model, by name: namedtuples, which numba compiles to the same
# loads as a tuple's (and their int fields to constants kept in registers), so that no kernel
# reads a slot by its index.
# The sizes (d_vocab the tokens read, d_vocab_out the logits), whether the MLP is GELU (1; else
# ReLU) and whether attention is causal (1; 0: every query reads every key of its window).
Dims = namedtuple(
    "Dims",
    ["d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "n_ctx", "gelu", "d_vocab_out", "causal"],
)
# Where each whole-model tensor starts in one seed's vector (-1: absent), GLOBAL's order.
Globals = namedtuple("Globals", ["W_E", "W_pos", "W_U", "b_U", "ln_final_w", "ln_final_b"])
# A model as the kernels take it: each tensor's start and size in one seed's vector (in
# Params' order), the Globals, the per-layer offsets (L, len(LAYER): -1 absent, read with the
# LN1W... names above) and the Dims.
Layout = namedtuple("Layout", ["starts", "sizes", "glob", "lay", "dims"])
# The config fields the kernel reads; any other field must keep its default to be covered.
KNOWN_FIELDS = {
    "d_model",
    "n_heads",
    "d_head",
    "n_layers",
    "d_mlp",
    "n_ctx",
    "d_vocab",
    "act_fn",
    "normalization",
    "qkv_bias",
    "attn_out",
    "unembed_bias",
    "ln_final",
    "d_vocab_out",
    "causal",
}


def supports(cfg: ModelConfig) -> bool:
    """Whether the compiled path computes this architecture (else: the NumPy engine)."""
    if numba is None:
        return False
    defaults = ModelConfig()
    for field in dataclasses.fields(ModelConfig):
        if field.name not in KNOWN_FIELDS and getattr(cfg, field.name) != getattr(
            defaults, field.name
        ):
            return False
    known = set(GLOBAL) | {f"blocks.{i}.{n}" for i in range(cfg.n_layers) for n in LAYER}
    return (
        cfg.act_fn in ("relu", "gelu")
        and cfg.normalization in ("none", "pre_ln")
        and set(cfg.param_shapes()) <= known
    )


def preferred(cfg: ModelConfig, dtype) -> bool:
    """Whether the compiled path is the faster engine for this model: in float64, up to
    d_model 32 (measured: 3.5x NumPy's speed at d_model 16, half of it at 64, where NumPy's
    matrix products win; float32 is NumPy's)."""
    return supports(cfg) and np.dtype(dtype) == np.float64 and cfg.d_model <= 32


@lru_cache(maxsize=64)
def layout(cfg: ModelConfig):
    """The model as the kernels take it (a Layout)."""
    if not supports(cfg):  # every kernel call passes here: an unknown tensor would be skipped
        raise FlatformerError(
            "the compiled path does not compute this model; the NumPy engine does"
        )
    starts, sizes, where, offset = [], [], {}, 0
    for name, shape in cfg.param_shapes().items():
        size = math.prod(shape)
        starts.append(offset)
        sizes.append(size)
        where[name] = offset
        offset += size
    glob = Globals(*(where.get(n, -1) for n in GLOBAL))
    per_layer = np.array(
        [[where.get(f"blocks.{i}.{n}", -1) for n in LAYER] for i in range(cfg.n_layers)],
        dtype=np.int64,
    )
    dims = Dims(
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.d_mlp,
        cfg.d_vocab,
        cfg.n_ctx,
        int(cfg.act_fn == "gelu"),
        cfg.vocab_out,
        int(cfg.causal),
    )
    return Layout(
        np.array(starts, dtype=np.int64),
        np.array(sizes, dtype=np.int64),
        glob,
        per_layer,
        dims,
    )
