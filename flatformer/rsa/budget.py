"""What a geometry costs before it starts, and the default stimuli it can afford.

A geometry runs every stimulus through the model (once per checkpoint with --training, once
per run with --seeds or --against), then compares every activation with every other: the
comparisons grow with activations^2 (every head of every hook is one) and with the stimuli's
pairs. A model of 5M parameters with a context of 1,024 has about 300 activations, so both
parts matter. The estimate below leans long; `geometry` narrows its default stimuli (the
held-out windows) to fit BUDGET_SECONDS, and shows it before it starts when it is long.
"""

from __future__ import annotations

from math import log2

from ..store.resources import geometry_activations

# Work units (multiply-adds) per second of the NumPy forward pass, measured on models of 0.1M
# to 5M parameters on a 2-core machine, rounded down so an estimate leans long.
FORWARD_UNITS_PER_SECOND = 6e9
SCORE_UNITS = 40  # an attention score's softmax and masking, in multiply-adds: passes, not BLAS
# One Kendall tau-a (scipy's kendalltau: a call, then sorts of the RDM vector) and one
# Procrustes pair (an SVD of at most stimuli x stimuli), measured the same way.
TAU_CALL_SECONDS = 5e-4
TAU_SORT_SECONDS = 1.5e-8  # per entry x log2(entries) of the RDM vector
SVD_SECONDS = 6e-10  # per stimuli^3
BUDGET_SECONDS = 300.0  # what a default geometry may take
MIN_STIMULI = 16  # fewer make RDMs of too few pairs to compare


def token_units(cfg, width: int) -> float:
    """Multiply-adds of one token through the model in a context of `width` tokens."""
    d, dh, h, kv = cfg.d_model, cfg.d_head, cfg.n_heads, cfg.n_kv_heads
    attention = d * dh * 2 * (h + kv) + h * width * (2 * dh + SCORE_UNITS)
    mlp = 0 if cfg.attn_only else (3 if cfg.gated_mlp else 2) * d * cfg.d_mlp
    return cfg.n_layers * (attention + mlp) + cfg.vocab_out * d


def forward_seconds(cfg, stimuli: int, width: int) -> float:
    """Seconds of running `stimuli` prompts of `width` tokens through the model."""
    return stimuli * width * token_units(cfg, width) / FORWARD_UNITS_PER_SECOND


def compare_seconds(cfg, stimuli: int) -> float:
    """Seconds of the activation x activation comparisons on `stimuli` stimuli: per pair of
    activations a tau-a of their RDMs and a Procrustes SVD, of the stimuli or of the widest
    activation if fewer (CKA and Spearman are a matrix product each, and negligible)."""
    activations = geometry_activations(cfg)
    pairs = activations * (activations - 1) / 2
    entries = max(stimuli * (stimuli - 1) / 2, 2)
    rank = min(stimuli, max(cfg.d_model, cfg.d_mlp, cfg.n_ctx))
    tau = TAU_CALL_SECONDS + TAU_SORT_SECONDS * entries * log2(entries)
    return pairs * (tau + SVD_SECONDS * rank**3)


def geometry_seconds(cfg, stimuli: int, width: int, passes: int = 1) -> float:
    """Estimated seconds of `geometry` on `stimuli` prompts of `width` tokens: `passes` runs of
    them through a model (checkpoints, seeds, or the --against run) and one activation x
    activation comparison."""
    return passes * forward_seconds(cfg, stimuli, width) + compare_seconds(cfg, stimuli)


def affordable_stimuli(cfg, stimuli: int, width: int, passes: int = 1) -> int:
    """The most of `stimuli` default stimuli (at least MIN_STIMULI) a geometry affords within
    BUDGET_SECONDS."""
    n = stimuli
    while n > MIN_STIMULI and geometry_seconds(cfg, n, width, passes) > BUDGET_SECONDS:
        n = max(MIN_STIMULI, int(n * 0.8))
    return n
