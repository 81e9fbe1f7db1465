"""The paper's five-step algorithm, measured: encode, detect, retrieve, produce, nudge.

The paper reads the algorithm off its figures; here each step is a number computed from the
weights and the held-out windows. The measures are small pure functions of a `Transformer` and
arrays, so other analyses (many-seed comparisons) can call them one by one:

- `class_separation`, `position_ladder`: (1) encode
- `query_separation`: (2) detect
- `retrieval`, `recency`: (3) retrieve
- `production`: (4) produce
- `nudge`: (5) nudge

Tasks declare which checks apply to them: a task whose rule is a recall declares its roles as
data (`Task.recall`: "after `marker`, say the most recent token in `wanted`", such as
plus-last-even), and `recall_checks(roles)` builds the five steps from them; a task may instead
declare a `checks` attribute (a function of a `Context` returning rows). `checks_for(task)` finds
them; the command reports those a task has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..tasks.windows import TaskData
from ..readout import combined_points, projections, write_heads
from ..readout.points import every_head
from ..tasks.base import Recall, recall_sources
from ..model.transformer import Transformer
from .hulls import ladder, separation


# ---- the measures ---------------------------------------------------------------------------


def class_separation(points_by_class: dict[str, np.ndarray]) -> dict[str, dict]:
    """For every pair of classes {"a / b": {"separable", "gap"}} (see geometry.separation)."""
    names = list(points_by_class)
    result = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            result[f"{a} / {b}"] = separation(points_by_class[a], points_by_class[b])
    return result


def position_ladder(model: Transformer) -> dict:
    """Are the position embeddings a ladder? (geometry.ladder of W_pos)."""
    return ladder(model.tensors["pos_embed.W_pos"])


def query_separation(model: Transformer, marker: int, head: int = 0) -> dict:
    """Are the marker's queries (at every position) linearly separable from every other token's
    queries in layer 0? {"separable", "gap"}."""
    q = projections(model).q[:, :, head]  # (V, T, dh)
    others = np.delete(q, marker, axis=0).reshape(-1, q.shape[-1])
    return separation(q[marker], others)


def _cache(model: Transformer, inputs, cache: dict | None) -> dict:
    """The activations of `inputs` (callers measuring several things pass one cache around)."""
    return model.run_with_cache(inputs)[1] if cache is None else cache


def retrieval(
    model: Transformer, inputs, index, wanted: np.ndarray, cache: dict | None = None
) -> dict[tuple, float]:
    """{(layer, head): fraction of windows whose attention row at `index` puts its largest weight
    on the most recent `wanted` token before it}."""
    cache = _cache(model, inputs, cache)
    source = recall_sources(inputs, index, wanted)
    rows = np.arange(len(inputs))
    result = {}
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # (B, H, T, T)
        share = retrieval_share(pattern[rows, :, index], source)  # (H,)
        result.update({(layer, h): float(share[h]) for h in range(model.cfg.n_heads)})
    return result


def retrieval_share(weights: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Retrieval for many models and heads at once: `weights` (..., B, H, T) are the attention
    rows at each window's prediction, `source` (B,) where the recall reads from; the fraction
    of windows whose top weight falls on it, (..., H)."""
    return (weights.argmax(-1) == source[:, None]).mean(-2)


def recency(
    model: Transformer,
    inputs,
    index,
    wanted: np.ndarray,
    layer: int = 0,
    head: int = 0,
    cache: dict | None = None,
) -> float:
    """Over every pair of `wanted` tokens before each window's `index`, the fraction where the
    later one gets the higher attention score from the query at `index` (`recency_share`)."""
    cache = _cache(model, inputs, cache)
    scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][:, head]  # (B, T, T)
    rows = scores[np.arange(len(inputs)), index]  # (B, T)
    return float(recency_share(rows[None], inputs, index, wanted)[0])


def recency_share(
    scores: np.ndarray, inputs: np.ndarray, index: np.ndarray, wanted: np.ndarray
) -> np.ndarray:
    """Recency for many models at once: scores (S, B, T) are each model's attention-score row
    at each window's `index`; per model, the fraction of pairs of `wanted` tokens before
    `index` whose later member scores higher. NaN when no window holds a pair."""
    T = inputs.shape[1]
    before = (np.arange(T)[None] < index[:, None]) & wanted[inputs]  # (B, T)
    pairs = before[:, :, None] & before[:, None, :] & np.triu(np.ones((T, T), bool), 1)
    later_higher = scores[:, :, None, :] > scores[:, :, :, None]  # [u, w]: w > u
    total = int(pairs.sum())
    wins = (later_higher & pairs).sum((1, 2, 3))
    return wins / total if total else np.full(len(scores), np.nan)


def production(
    model: Transformer,
    inputs,
    index,
    wanted: np.ndarray,
    layer: int = 0,
    head: int = 0,
    cache: dict | None = None,
) -> np.ndarray:
    """Per window, the cosine similarity between what `head` writes to the stream at `index`
    and what it would write for the target's own value vector (the head's v at the source
    position), both through W_O (or into the head's slice without W_O). 1 means the attention
    output is the target's value, scaled."""
    cfg, t = model.cfg, model.tensors
    cache = _cache(model, inputs, cache)
    rows = np.arange(len(inputs))
    source = recall_sources(inputs, index, wanted)
    z = cache[f"blocks.{layer}.attn.hook_z"][rows, index]  # (B, H, dh)
    v = every_head(cfg, cache[f"blocks.{layer}.attn.hook_v"][rows, source])  # (B, H, dh)
    W_O = t[f"blocks.{layer}.attn.W_O"] if cfg.attn_out else None
    z, v = (write_heads(cfg, x, W_O)[:, head] for x in (z, v))  # (B, d)
    norms = np.linalg.norm(z, axis=1) * np.linalg.norm(v, axis=1)
    return (z * v).sum(1) / np.where(norms > 0, norms, 1.0)


def nudge(model: Transformer, inputs, index, targets) -> dict:
    """The fraction of windows whose prediction at `index` is the target ("z lands in the
    target's zone": in one layer, z = e + Attn(e) goes through the MLP and W_U), and the same
    fraction with the last layer's attention output removed (z = e: where the point would be
    without attention)."""
    rows = np.arange(len(inputs))
    with_attn = model(inputs)[rows, index].argmax(-1) == targets
    last = f"blocks.{model.cfg.n_layers - 1}.hook_attn_out"
    no_attention = {last: lambda x, n: np.zeros_like(x)}
    without = model(inputs, no_attention)[rows, index].argmax(-1) == targets
    return {"with_attention": float(with_attn.mean()), "without_attention": float(without.mean())}


# ---- checks a task can declare -----------------------------------------------------------------


@dataclass
class Context:
    """What a check needs: the model, its task and the task's held-out data."""

    model: Transformer
    task: object
    data: TaskData


def row(step: str, measure: str, value: float, shown: str) -> dict:
    return {"step": step, "measure": measure, "value": value, "shown": shown}


def recall_checks(roles: Recall) -> Callable:
    """The five steps for a task "after `roles.marker`, the most recent token in
    `roles.wanted`"; `roles.other` are the rest of the tokens that may be recalled past, and
    `roles.names` label the three classes."""
    marker, names = roles.marker, roles.names

    def checks(ctx: Context) -> list[dict]:
        model, vocab = ctx.model, list(ctx.task.vocab)
        m, want_ids, other_ids = roles.ids(vocab)
        wanted_mask = roles.mask(vocab)
        data = ctx.data
        # The windows whose prediction follows the marker and is forced (a recall to measure).
        keep = (data.rule_targets >= 0) & (
            data.rule_inputs[np.arange(len(data.rule_index)), data.rule_index] == m
        )
        inputs, index, targets = (
            data.rule_inputs[keep],
            data.rule_index[keep],
            data.rule_targets[keep],
        )
        W_E, e = model.tensors["embed.W_E"], combined_points(model)
        d = model.cfg.d_model
        rows = []
        for label, points in (
            ("token embeddings", lambda ids: W_E[ids]),
            ("token + position embeddings", lambda ids: e[ids].reshape(-1, d)),
        ):
            pairs = class_separation(
                {names[0]: points(want_ids), names[1]: points(other_ids), names[2]: points([m])}
            )
            n_sep = sum(p["separable"] for p in pairs.values())
            smallest = min(p["gap"] for p in pairs.values())
            rows.append(
                row(
                    "1 encode",
                    f"{' / '.join(names)} {label}: pairs linearly separable",
                    n_sep / len(pairs),
                    f"{n_sep} of {len(pairs)} (smallest gap {smallest:.2f} of spread)",
                )
            )
        if not model.cfg.rotary:  # rotary positions are a turn of q and k, no W_pos
            lad = position_ladder(model)
            rows.append(
                row(
                    "1 encode",
                    "positions in order along the ladder's axis (rank corr.)",
                    lad["rho"],
                    f"{lad['rho']:.2f}; {lad['steps_in_order']} of "
                    f"{len(lad['along']) - 1} steps in order; the axis holds "
                    f"{lad['axis_share']:.0%} of the variance",
                )
            )
        if not len(targets):
            return rows
        cache = model.run_with_cache(inputs)[1]
        found = retrieval(model, inputs, index, wanted_mask, cache)
        layer, head = max(found, key=found.get)
        where = f"head {layer}.{head}"
        if layer == 0:
            qs = query_separation(model, m, head)
            rows.append(
                row(
                    "2 detect",
                    f"{marker} queries separable from the other queries ({where})",
                    qs["gap"],
                    f"{'yes' if qs['separable'] else 'no'} (gap {qs['gap']:.2f} of spread)",
                )
            )
        rows.append(
            row(
                "3 retrieve",
                f"{marker} rows with top weight on the most recent {names[0]} ({where})",
                found[(layer, head)],
                f"{found[(layer, head)]:.1%} of {len(targets)}",
            )
        )
        rec = recency(model, inputs, index, wanted_mask, layer, head, cache)
        rows.append(
            row(
                "3 retrieve",
                f"a later {names[0]} outscores an earlier one",
                rec,
                f"{rec:.1%} of pairs",
            )
        )
        cos = production(model, inputs, index, wanted_mask, layer, head, cache)
        rows.append(
            row(
                "4 produce",
                f"cos(head output, target's value) ({where})",
                float(cos.mean()),
                f"mean {cos.mean():.3f}, min {cos.min():.3f}",
            )
        )
        nd = nudge(model, inputs, index, targets)
        rows.append(
            row(
                "5 nudge",
                "z lands in the target's zone",
                nd["with_attention"],
                f"{nd['with_attention']:.1%} (rule error {1 - nd['with_attention']:.1%})",
            )
        )
        rows.append(
            row(
                "5 nudge",
                "... without attention (z = e)",
                nd["without_attention"],
                f"{nd['without_attention']:.1%}",
            )
        )
        return rows

    return checks


def checks_for(task) -> Callable[[Context], list[dict]] | None:
    """The checks a task declares (its `checks` attribute, else the recall checks of its
    `recall` roles), or None."""
    declared = getattr(type(task), "checks", None)
    if callable(declared):
        return declared
    roles = getattr(task, "recall", None)
    return None if roles is None else recall_checks(roles)


def run_checks(model: Transformer, task, data: TaskData) -> list[dict] | None:
    """The rows of the task's checks on this model, or None when the task declares none."""
    checks = checks_for(task)
    return None if checks is None else checks(Context(model, task, data))
