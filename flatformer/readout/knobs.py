"""Knobs: interventions on a model through its named activations, and what each costs.

Each knob is a dict of hooks `{activation name: fn(activation, name) -> activation}`, the
contract `Transformer.run_with_cache` takes, so the engine itself never changes. The explorer
page offers the same knobs (`explorer/model.js` applies each to the same activation) and
reports the same cost: `knob_kl`, KL(original || changed) of the next-token distribution, in
nats.

Examples:
    >>> kl = knob_kls(model, prompts, [Knob("head 0.0 zero", zero_head(0, 0))])["head 0.0 zero"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..tasks.windows import evenly_spaced
from ..errors import FlatformerError
from ..store.limits import number
from ..model.transformer import Transformer
from .batches import next_token_logits
from .probs import knob_kl

Hooks = dict[str, Callable]

BETAS = (0.0, 0.5, 2.0, 3.0)  # the attention scalings every knob table shows
MEAN_WINDOWS = 512  # held-out windows a mean-ablated head's average is taken over


def reference_windows(data) -> np.ndarray:
    """The windows mean ablation averages over: a `TaskData`'s held-out windows, or
    MEAN_WINDOWS of them evenly spaced when there are more (held-out sets may be ordered, e.g.
    modular-addition's pairs by their first number). The knob tables, the circuits and the
    explorer page all average over these."""
    return data.val_inputs[evenly_spaced(len(data.val_inputs), MEAN_WINDOWS)]


def zero_head(layer: int, head: int) -> Hooks:
    """Head `head` of `layer` off: its output z is zero, so it writes nothing."""

    def hook(z, name):  # z: (B, T, H, dh)
        z = z.copy()
        z[:, :, head] = 0.0
        return z

    return {f"blocks.{layer}.attn.hook_z": hook}


def head_means(model: Transformer, tokens) -> dict[int, np.ndarray]:
    """Each layer's z averaged over a reference batch, per position: {layer: (T, H, dh)}."""
    _, cache = model.run_with_cache(tokens)
    return {
        layer: cache[f"blocks.{layer}.attn.hook_z"].mean(0) for layer in range(model.cfg.n_layers)
    }


def mean_head(layer: int, head: int, means: dict[int, np.ndarray]) -> Hooks:
    """Head `head` of `layer` replaced by its average output at each position (mean ablation)."""
    mean = means[layer]

    def hook(z, name):
        if z.shape[1] > len(mean):
            raise FlatformerError(
                f"mean ablation: reference windows have {len(mean)} positions, "
                f"the prompt {z.shape[1]}"
            )
        z = z.copy()
        z[:, :, head] = mean[: z.shape[1], head]
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


def switches(
    cfg, heads_off=(), mlps_off=(), positions: bool = True, beta: float | None = None
) -> Hooks:
    """The explorer page's switches as one set of hooks: heads (layer, head) off, MLPs off,
    position embeddings off, attention scores scaled by beta. Bad indices raise."""
    hooks = []
    for layer, head in heads_off:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise FlatformerError(
                f"no head {layer}.{head}: the model has {cfg.n_layers} layer(s) "
                f"of {cfg.n_heads} head(s), numbered from 0"
            )
        hooks.append(zero_head(layer, head))
    for layer in mlps_off:
        if not 0 <= layer < cfg.n_layers:
            raise FlatformerError(f"no MLP {layer}: the model has {cfg.n_layers} layer(s)")
        if cfg.attn_only:
            raise FlatformerError("no MLP to switch off: the blocks are attention-only")
        hooks.append(mlp_off(layer))
    if not positions:
        hooks.append(positions_off())
    if beta is not None:
        number("beta", beta, -1000, 1000)
        hooks.append(scale_scores(beta, n_layers=cfg.n_layers))
    return combine(*hooks)


@dataclass
class Knob:
    """A named intervention, like one of the explorer page's switches."""

    name: str
    hooks: Hooks


def standard_knobs(model: Transformer, reference, betas=BETAS) -> list[Knob]:
    """Every head off (zero, and mean over the `reference` windows), every MLP off, positions
    off (a model with position embeddings: not rotary positions), and the attention scores of every layer scaled by each beta: the knob table of
    `flatformer analyze` and of the explorer page, in that order."""
    cfg = model.cfg
    means = head_means(model, reference)
    knobs = []
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            knobs.append(Knob(f"head {layer}.{head} zero", zero_head(layer, head)))
            knobs.append(Knob(f"head {layer}.{head} mean", mean_head(layer, head, means)))
    if not cfg.attn_only:
        knobs += [Knob(f"mlp {layer} off", mlp_off(layer)) for layer in range(cfg.n_layers)]
    if not cfg.rotary:  # rotary positions are a turn of q and k, no embedding to switch off
        knobs.append(Knob("positions off", positions_off()))
    knobs += [Knob(f"beta {beta:g}", scale_scores(beta, n_layers=cfg.n_layers)) for beta in betas]
    return knobs


def knob_kls(model: Transformer, prompts, knobs: list[Knob]) -> dict[str, np.ndarray]:
    """Per-prompt KL(original || changed), nats, of each knob's next-token distribution."""
    original = next_token_logits(model, prompts)
    return {
        knob.name: knob_kl(original, next_token_logits(model, prompts, knob.hooks))
        for knob in knobs
    }
