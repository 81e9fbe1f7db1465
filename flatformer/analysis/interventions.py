"""Activation patching: which activations carry the difference between two prompts.

The knobs (head zero/mean ablation, MLP off, positions off, attention scaled by beta) and their
cost, KL(original || changed), live in the numeric layer, `flatformer.readout.knobs`, shared with
the explorer page. A patch is a hook like any knob: `{activation name: fn(activation, name)}`.
"""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from ..readout.knobs import (
    Hooks,
    Knob,
    combine,
    head_means,
    mean_head,
    mlp_off,
    positions_off,
    scale_scores,
    standard_knobs,
    switches,
    zero_head,
)
from ..readout.probs import kl_divergence
from ..model.transformer import Transformer


def _axes(name: str):
    """(position axis, head axis or None) of an activation's (B, ...) array."""
    if name.endswith(("hook_pattern", "hook_attn_scores")):
        return 2, 1  # (B, H, query, key)
    if name.endswith(("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k")):
        return 1, 2  # (B, T, H, dh)
    return 1, None  # (B, T, ...)


def patch(
    source_cache: dict, name: str, position: int | None = None, head: int | None = None
) -> Hooks:
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
            raise FlatformerError(
                f"patching {name}: the two runs must have the same shape, "
                f"got {source.shape} and {x.shape}"
            )
        x = x.copy()
        x[index] = source[index]
        return x

    return {name: hook}


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
        raise FlatformerError(
            f"patching: prompts must be equally long, got {clean.shape[1]} "
            f"and {corrupt.shape[1]} tokens"
        )
    cfg = model.cfg
    if names is None:
        names = []
        for layer in range(cfg.n_layers):
            names.append(f"blocks.{layer}.hook_resid_pre")
            if not cfg.attn_only:
                names.append(f"blocks.{layer}.hook_resid_mid")
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
    defined = np.abs(gap) > 1e-12  # same top token in both runs: no difference to restore
    restored, kl = np.full((len(names), T), np.nan), np.zeros((len(names), T))
    for i, name in enumerate(names):
        for t in range(T):
            logits = model(corrupt, patch(clean_cache, name, position=t))
            if defined.any():
                restored[i, t] = ((diff(logits) - base)[defined] / gap[defined]).mean()
            kl[i, t] = kl_divergence(clean_logits[:, -1], logits[:, -1]).mean()
    return names, restored, kl


def _json_rows(a: np.ndarray) -> list:
    """Rows of floats for JSON, a position no patch reaches (NaN) as None."""
    return [[None if np.isnan(v) else float(v) for v in r] for r in a]


def pair_patching(model, clean, corrupt) -> dict:
    """`patching_sweep` of one clean prompt into its corrupt one, as the report shows it."""
    names, restored, kl = patching_sweep(model, clean, corrupt)
    return {"names": names, "restored": _json_rows(restored), "kl": kl.tolist()}


def example_patching(model, task, examples) -> dict:
    """Activation patching of each clean prompt into its corrupt one, positions counted back
    from the read position (prompts of different lengths align there): per length, patching as
    `--patch` does it over that length's examples, then the mean over lengths weighted by their
    examples, over the last positions every prompt has."""
    tokens, index, _, corrupt, _ = examples
    lengths = np.unique(index + 1)
    m = int(lengths.min())
    total = weight = kl_total = 0.0
    for L in lengths:
        rows = np.flatnonzero(index + 1 == L)
        names, restored, kl = patching_sweep(model, tokens[rows, :L], corrupt[rows, :L])
        part = restored[:, L - m :]
        seen = ~np.isnan(part)
        total = total + np.where(seen, part, 0.0) * len(rows)
        weight = weight + seen * len(rows)
        kl_total = kl_total + kl[:, L - m :] * len(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        restored = np.where(weight > 0, total / np.maximum(weight, 1e-300), np.nan)
    return {
        "clean": f"{len(index)} example prompts, e.g. {task.decode(tokens[0, : index[0] + 1])}",
        "corrupt": f"their corrupt prompts, e.g. {task.decode(corrupt[0, : index[0] + 1])}",
        "names": names,
        "positions": [str(t - m + 1) if t < m - 1 else "last" for t in range(m)],
        "restored": _json_rows(restored),
        "kl": (kl_total / len(index)).tolist(),
    }
