"""Interventions on a model through its named activations, and what they cost in nats.

Each intervention is a dict of hooks `{activation name: fn(activation, name) -> activation}`,
the contract `Transformer.run_with_cache` takes, so the engine itself never changes. The cost of
an intervention on a prompt is the KL divergence KL(original || changed) of the next-token
distribution at the prompt's last position.

>>> kl = knob_kls(model, prompts, [Knob("head 0.0 off", zero_head(0, 0))])["head 0.0 off"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import FlatformerError
from ..transformer import Transformer

Hooks = dict[str, Callable]


def zero_head(layer: int, head: int) -> Hooks:
    """Head `head` of `layer` off: its output z is zero, so it writes nothing."""
    def hook(z, name):                                          # z: (B, T, H, dh)
        z = z.copy()
        z[:, :, head] = 0.0
        return z
    return {f"blocks.{layer}.attn.hook_z": hook}


def head_means(model: Transformer, tokens) -> dict[int, np.ndarray]:
    """Each layer's z averaged over a reference batch, per position: {layer: (T, H, dh)}."""
    _, cache = model.run_with_cache(tokens)
    return {layer: cache[f"blocks.{layer}.attn.hook_z"].mean(0)
            for layer in range(model.cfg.n_layers)}


def mean_head(layer: int, head: int, means: dict[int, np.ndarray]) -> Hooks:
    """Head `head` of `layer` replaced by its average output at each position (mean ablation)."""
    mean = means[layer]

    def hook(z, name):
        if z.shape[1] > len(mean):
            raise FlatformerError(f"mean ablation: reference windows have {len(mean)} positions, "
                                  f"the prompt {z.shape[1]}")
        z = z.copy()
        z[:, :, head] = mean[:z.shape[1], head]
        return z
    return {f"blocks.{layer}.attn.hook_z": hook}


def mlp_off(layer: int) -> Hooks:
    """The MLP of `layer` off: it adds nothing to the residual stream (bias included)."""
    return {f"blocks.{layer}.hook_mlp_out": lambda x, name: np.zeros_like(x)}


def positions_off() -> Hooks:
    """Position embeddings off: every token starts as if it had no position."""
    return {"hook_pos_embed": lambda x, name: np.zeros_like(x)}


def scale_scores(beta: float, layers=None, n_layers: int = 1) -> Hooks:
    """Attention scores times `beta` in the given layers (default all `n_layers`).

    Only the visible scores are scaled: the causal mask's -inf must stay -inf (0 * -inf would be
    NaN). beta = 0 gives uniform attention over the visible keys, beta = 1 changes nothing, and a
    large beta sharpens each row toward its top key.
    """
    def hook(scores, name):
        visible = np.isfinite(scores)
        return np.multiply(scores, beta, out=scores.copy(), where=visible)
    layers = range(n_layers) if layers is None else layers
    return {f"blocks.{layer}.attn.hook_attn_scores": hook for layer in layers}


def _axes(name: str):
    """(position axis, head axis or None) of an activation's (B, ...) array."""
    if name.endswith(("hook_pattern", "hook_attn_scores")):
        return 2, 1                                             # (B, H, query, key)
    if name.endswith(("hook_q", "hook_k", "hook_v", "hook_z")):
        return 1, 2                                             # (B, T, H, dh)
    return 1, None                                              # (B, T, ...)


def patch(source_cache: dict, name: str, position: int | None = None,
          head: int | None = None) -> Hooks:
    """Activation `name` replaced by its value in another run (`source_cache`): everywhere, or
    only at one `position` (a query row for patterns and scores) and/or one `head`."""
    source = source_cache[name]
    position_axis, head_axis = _axes(name)
    if head is not None and head_axis is None:
        raise FlatformerError(f"{name} has no head axis to patch one head of")
    index = [slice(None)] * source.ndim
    if position is not None:
        index[position_axis] = position
    if head is not None:
        index[head_axis] = head
    index = tuple(index)

    def hook(x, hook_name):
        if source.shape != x.shape:
            raise FlatformerError(f"patching {name}: the two runs must have the same shape, "
                                  f"got {source.shape} and {x.shape}")
        x = x.copy()
        x[index] = source[index]
        return x
    return {name: hook}


def combine(*hook_sets: Hooks) -> Hooks:
    """Several interventions at once; hooks on the same activation run in the given order."""
    combined: Hooks = {}
    for hooks in hook_sets:
        for name, fn in hooks.items():
            if name in combined:
                first = combined[name]
                combined[name] = (lambda f, g: lambda x, n: g(f(x, n), n))(first, fn)
            else:
                combined[name] = fn
    return combined


def switches(cfg, heads_off=(), mlps_off=(), positions: bool = True,
             beta: float | None = None) -> Hooks:
    """The simulator page's switches as one set of hooks: heads (layer, head) off, MLPs off,
    position embeddings off, attention scores scaled by beta. Bad indices raise."""
    hooks = []
    for layer, head in heads_off:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise FlatformerError(f"no head {layer}.{head}: the model has {cfg.n_layers} layer(s) "
                                  f"of {cfg.n_heads} head(s), numbered from 0")
        hooks.append(zero_head(layer, head))
    for layer in mlps_off:
        if not 0 <= layer < cfg.n_layers:
            raise FlatformerError(f"no MLP {layer}: the model has {cfg.n_layers} layer(s)")
        hooks.append(mlp_off(layer))
    if not positions:
        hooks.append(positions_off())
    if beta is not None:
        if not np.isfinite(beta):
            raise FlatformerError(f"beta must be a finite number, got {beta}")
        hooks.append(scale_scores(beta, n_layers=cfg.n_layers))
    return combine(*hooks)


def next_token_logits(model: Transformer, prompts, hooks: Hooks | None = None) -> np.ndarray:
    """Logits (P, V) at the last position of each prompt (prompts may differ in length)."""
    prompts = [np.asarray(p) for p in prompts]
    if not prompts:
        raise FlatformerError("no prompts to run")
    result = np.empty((len(prompts), model.cfg.d_vocab))
    lengths = np.array([len(p) for p in prompts])
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        batch = np.stack([prompts[i] for i in rows])
        result[rows] = model(batch, hooks)[:, -1]
    return result


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def kl_divergence(original: np.ndarray, changed: np.ndarray) -> np.ndarray:
    """KL(p || q) in nats between the distributions of two logit arrays (..., V) -> (...)."""
    log_p, log_q = log_softmax(original), log_softmax(changed)
    # Mathematically >= 0; rounding can leave -1e-16 when the two are equal.
    return np.maximum((np.exp(log_p) * (log_p - log_q)).sum(-1), 0.0)


@dataclass
class Knob:
    """A named intervention, like one of the simulator page's switches."""

    name: str
    hooks: Hooks


def standard_knobs(model: Transformer, reference, betas=(0.0, 0.5, 2.0, 3.0)) -> list[Knob]:
    """Every head off (zero and mean over `reference` windows), every MLP off, positions off,
    and the attention scores of every layer scaled by each beta."""
    cfg = model.cfg
    means = head_means(model, reference)
    knobs = []
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            knobs.append(Knob(f"head {layer}.{head} zero", zero_head(layer, head)))
            knobs.append(Knob(f"head {layer}.{head} mean", mean_head(layer, head, means)))
    knobs += [Knob(f"mlp {layer} off", mlp_off(layer)) for layer in range(cfg.n_layers)]
    knobs.append(Knob("positions off", positions_off()))
    knobs += [Knob(f"beta {beta:g}", scale_scores(beta, n_layers=cfg.n_layers)) for beta in betas]
    return knobs


def knob_kls(model: Transformer, prompts, knobs: list[Knob]) -> dict[str, np.ndarray]:
    """Per-prompt KL (nats) of each knob's next-token distribution from the original."""
    original = next_token_logits(model, prompts)
    return {knob.name: kl_divergence(original, next_token_logits(model, prompts, knob.hooks))
            for knob in knobs}


def patching_sweep(model: Transformer, clean, corrupt, names: list[str] | None = None):
    """Which activations carry the difference between two prompts of the same length.

    For every activation in `names` (default: the residual stream before each layer, after each
    attention and after each MLP) and every position, the clean activation is patched into the
    corrupt run. Returns (names, restored (n_names, T), kl (n_names, T)): `restored` is the share
    of the clean-minus-corrupt logit difference (between the two runs' top tokens, at the last
    position) the patch brings back (1 = fully clean, 0 = still corrupt); `kl` is
    KL(clean || patched).
    """
    clean, corrupt = model.check_tokens(clean), model.check_tokens(corrupt)
    if clean.shape != corrupt.shape:
        raise FlatformerError(f"patching: prompts must be equally long, got {clean.shape[1]} "
                              f"and {corrupt.shape[1]} tokens")
    cfg = model.cfg
    if names is None:
        names = []
        for layer in range(cfg.n_layers):
            names += [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_resid_mid"]
        names.append(f"blocks.{cfg.n_layers - 1}.hook_resid_post")
    clean_logits, clean_cache = model.run_with_cache(clean)
    corrupt_logits = model(corrupt)
    good, bad = clean_logits[:, -1].argmax(-1), corrupt_logits[:, -1].argmax(-1)
    rows = np.arange(len(clean))

    def diff(logits):
        return logits[rows, -1, good] - logits[rows, -1, bad]

    base, top = diff(corrupt_logits), diff(clean_logits)
    T = clean.shape[1]
    gap = top - base
    defined = np.abs(gap) > 1e-12      # same top token in both runs: no difference to restore
    restored, kl = np.full((len(names), T), np.nan), np.zeros((len(names), T))
    for i, name in enumerate(names):
        for t in range(T):
            logits = model(corrupt, patch(clean_cache, name, position=t))
            if defined.any():
                restored[i, t] = ((diff(logits) - base)[defined] / gap[defined]).mean()
            kl[i, t] = kl_divergence(clean_logits[:, -1], logits[:, -1]).mean()
    return names, restored, kl
