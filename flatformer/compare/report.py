"""What a `compare.Comparison` reports: the table of structures (necessary or varying), the
numbers, each seed's row, the grokking seeds' key frequencies and algorithm, the JSON of it all,
and the aligned arrays the comparison figures draw (figures.py draws them; nothing here
draws)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..engine.model import Params
from ..readout import grid, square_limits
from .measures import Comparison


# --------------------------------------------------------------------------- the summary

# (key, label) in the order the tables show them; {0} {1} {2} are the recall task's class names.
STRUCTURES = [
    ("tokens_separable", "{0} / {1} / {2} token embeddings linearly separable"),
    ("points_separable", "{0} / {1} / {2} token + position points linearly separable"),
    ("wanted_collinear", "{0} token embeddings on a line"),
    ("ladder", "positions a monotone ladder"),
    ("queries_separate", "{2} queries apart from all other queries"),
    ("recency_weights", "recency in the weights: each {0} key rises with position"),
    ("recency_windows", "recency in the data: a later {0} always outscores an earlier one"),
    ("zones_once", "each answer's zone crossed once around the landscape"),
    ("zones_follow_line", "zones around the landscape in the {0} tokens' order along their line"),
]
ORDERS = [
    ("line_order", "order of the {0} tokens along their line"),
    ("zone_order", "cyclic order of the answers' zones"),
]


def structure_label(c: Comparison, key: str) -> str:
    names = c.spec.names if c.spec else ("", "", "")
    return dict(STRUCTURES + ORDERS)[key].format(*names)


def summary(c: Comparison) -> list[dict]:
    """One row per structure: in how many successful and failed seeds it holds, and whether it
    holds in every successful seed ("necessary") or not ("varies"). For an order (categorical),
    the count is of the successful seeds' most common order."""
    ok = c.successful
    n_ok, n_bad = int(ok.sum()), int((~ok).sum())
    rows = []
    for key, _ in STRUCTURES:
        if key not in c.measures:
            continue
        holds = np.asarray(c.measures[key], dtype=bool)
        n = int(holds[ok].sum())
        row = {
            "key": key,
            "structure": structure_label(c, key),
            "successful": n,
            "n_successful": n_ok,
            "failed": int(holds[~ok].sum()),
            "n_failed": n_bad,
            "verdict": "no seed learned the task"
            if not n_ok
            else "necessary"
            if n == n_ok
            else "varies",
        }
        share = c.measures.get(key + "_share")
        if share is not None and n_ok:
            row["worst_successful_share"] = float(np.nanmin(share[ok]))
        rows.append(row)
    for key, _ in ORDERS:
        orders = getattr(c, key)
        if all(order is None for order in orders):
            continue
        counts = Counter(orders[i] for i in np.flatnonzero(ok))
        top, top_n = counts.most_common(1)[0] if counts else (None, 0)
        rows.append(
            {
                "key": key,
                "structure": structure_label(c, key),
                "successful": top_n,
                "n_successful": n_ok,
                "failed": sum(orders[i] == top for i in np.flatnonzero(~ok)),
                "n_failed": n_bad,
                "order": c.order_text(top),
                "n_orders": len(counts),
                "verdict": "no seed learned the task"
                if not n_ok
                else "necessary"
                if len(counts) == 1
                else f"varies ({len(counts)} orders)",
            }
        )
    return rows


def numbers(c: Comparison) -> dict:
    """Median and worst (largest) rule error and alignment residuals over the successful seeds."""
    ok = c.successful
    out = {}
    for key, values in (
        ("rule_error", c.rule_error),
        ("residual", c.residual),
        ("qk_residual", c.qk_residual.max(1)),
    ):
        v = values[ok] if ok.any() else values
        out[key] = {"median": float(np.median(v)), "max": float(v.max())}
    return out


def per_seed(c: Comparison) -> list[dict]:
    rows = []
    for s, seed in enumerate(c.seeds):
        row = {
            "seed": seed,
            "rule_error": float(c.rule_error[s]),
            "successful": bool(c.successful[s]),
            "residual": float(c.residual[s]),
            "qk_residual": c.qk_residual[s].tolist(),
            "R": c.R[s].tolist(),
            "qk_maps": c.S_qk[s].tolist(),
            "reflection": bool(np.linalg.det(c.R[s]) < 0),
            "zone_order": c.order_text(c.zone_order[s]),
            "line_order": c.order_text(c.line_order[s]),
        }
        for key, values in c.measures.items():
            if key not in row:
                value = values[s]
                row[key] = (
                    bool(value)
                    if isinstance(value, (bool, np.bool_))
                    else int(value)
                    if isinstance(value, (np.integer,))
                    else float(value)
                )
        rows.append(row)
    return rows


def grokking_seeds(c: Comparison) -> list[dict] | None:
    """For modular-addition: each seed's own key frequencies and which algorithm it learned
    (clock or pizza, by Zhong et al.'s measures), from analysis.grokking. None for other tasks."""
    if c.task.name != "modular-addition":
        return None
    from ..analysis import grokking as G

    p, rows = c.task.p, []
    for seed, model in zip(c.seeds, c.models):
        params = Params.stack(c.cfg, [model.tensors])
        logits = G.pair_logits(params, p)[0]
        rows.append(
            {
                "seed": seed,
                "key_frequencies": G.key_frequencies(model.tensors, p),
                **G.algorithm(params, logits, p),
            }
        )
    return rows


def to_json(c: Comparison) -> dict:
    """Everything measured, as plain JSON types."""
    return {
        "task": c.task.name,
        "step": c.step,
        "seeds": c.seeds,
        "reference_seed": c.seeds[c.reference],
        "success_threshold": c.success,
        "n_successful": int(c.successful.sum()),
        "rule_positions": c.n_positions,
        "rotation_is_symmetry": c.symmetric,
        "recall_roles": None
        if c.spec is None
        else {
            "marker": c.vocab[c.spec.marker],
            "wanted": [c.vocab[i] for i in c.spec.wanted],
            "other": [c.vocab[i] for i in c.spec.other],
            "names": list(c.spec.names),
        },
        "zone_targets": [c.vocab[i] for i in c.targets],
        "numbers": numbers(c),
        "summary": summary(c),
        "per_seed": per_seed(c),
        "grokking": grokking_seeds(c),
    }


# --------------------------------------------------------------------------- for the figures


@dataclass
class AlignedLandscape:
    """One seed's output argmax over a grid of the reference frame."""

    xs: np.ndarray
    ys: np.ndarray
    argmax: np.ndarray

    @property
    def extent(self):
        return (self.xs[0], self.xs[-1], self.ys[0], self.ys[-1])


def panel_limits(c: Comparison, s: int, zones: bool = True) -> tuple:
    """Square limits around seed s's aligned points (with `zones`, also its z points and the
    circle its zone order is read along, when known)."""
    extra = []
    if zones and c.z_targets is not None:
        r = c.zone_radius[s]
        extra = [c.z_targets[s], c.zone_centre[s] + np.array([[-r, -r], [r, r]])]
    return square_limits(c.points[s], *extra, pad=0.04)


def aligned_landscapes(c: Comparison, resolution: int = 120) -> list[AlignedLandscape]:
    """Each seed's argmax map over its own panel limits, in the reference frame."""
    if c.cfg.d_model != 2:
        return []
    out = []
    for s in range(len(c.seeds)):
        limits = panel_limits(c, s)
        xs, ys, pts = grid(limits, resolution)
        out.append(AlignedLandscape(xs, ys, c.aligned_logits(s, pts).argmax(-1)))
    return out
