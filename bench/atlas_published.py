"""Our atlas beside Zhong et al.'s published table: which mechanism, per attn_coeff bin.

    python bench/atlas_published.py PUBLISHED.csv OURS/results.csv [--bins 10] [--all]

PUBLISHED.csv is `result/1l_fixedwidth.csv` of the fjzzq2002/pizza repository (fetched by the
user; flatformer does not ship it). OURS is an atlas's results.csv (`flatformer atlas`). By
default the published rows are kept at the paper's main setting: one layer, d_model 128, ReLU,
no diff_vocab or eqn_sign (`--all` keeps every row with its measures).

Each run of either table is named by one rule, analysis/mechanism.py's `classify` (a pizza:
distance irrelevance below 0.4 and gradient symmetricity at least 0.98; a clock: the opposite of
both; else other; fewer than 99% of all pairs right: other). A published run's accuracy over all
pairs is frac x training_accuracy + (1 - frac) x validation_accuracy. Per bin of attn_coeff
(equal bins over [0, 1]): each table's count and share of clocks and pizzas, and for each
measure the two-sample Kolmogorov-Smirnov distance between the tables' distributions in that
bin (and over all runs). Writes bench/results/atlas_published.md and, with --figure, the two
diagrams side by side.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import record  # noqa: E402

from flatformer.analysis.mechanism import classify  # noqa: E402
from flatformer.atlas import MECHANISMS, phase_diagram, read_atlas  # noqa: E402
from flatformer.store.read import text_stream  # noqa: E402

MEASURES = ("gradient_sim", "distance_irrelevance", "circularity")
MAIN = {"n_layers": "1", "d_model": "128", "act_fn": "ReLU", "diff_vocab": "0", "eqn_sign": "0"}
MAX_BYTES = 2**30


def _float(text: str):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_published(path, keep_all: bool = False) -> list[dict]:
    """The published table's runs with their measures: attn_coeff, the three measures,
    accuracy over all pairs and the name `classify` gives. Rows without the measures (runs
    that had not finished) are left out; without `keep_all`, so are rows off the main
    setting."""
    rows = []
    for row in csv.DictReader(text_stream(path, "published table", MAX_BYTES)):
        if not keep_all and any(row.get(k) != v for k, v in MAIN.items()):
            continue
        values = {k: _float(row.get(k)) for k in ("attn_coeff", "frac", *MEASURES)}
        train, val = _float(row.get("training_accuracy")), _float(row.get("validation_accuracy"))
        if any(v is None for v in values.values()) or train is None or val is None:
            continue
        accuracy = values["frac"] * train + (1 - values["frac"]) * val
        rows.append(
            {
                "job": row.get("runid") or row.get("Name") or "",
                "seed": 0,
                "attn_coeff": values["attn_coeff"],
                **{k: values[k] for k in MEASURES},
                "accuracy": accuracy,
                "mechanism": classify(
                    values["gradient_sim"], values["distance_irrelevance"], accuracy
                ),
            }
        )
    return rows


def read_ours(path) -> list[dict]:
    """An atlas's runs with their measures (rows without a mechanism left out)."""
    return [
        r
        for r in read_atlas(path)
        if r.get("mechanism") and all(isinstance(r.get(k), float) for k in MEASURES[:2])
    ]


def ks_distance(a, b) -> float | None:
    """The two-sample Kolmogorov-Smirnov statistic sup |F_a - F_b| (None: a side is empty)."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    if not len(a) or not len(b):
        return None
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def compare(published: list[dict], ours: list[dict], bins: int = 10) -> list[dict]:
    """One entry per attn_coeff bin (equal bins over [0, 1], the last closed, as the phase
    diagram bins), then one for all runs: each table's count and shares of each mechanism, and
    the KS distance of each measure."""
    edges = np.linspace(0, 1, bins + 1)

    def bin_of(value: float) -> int:
        return int(np.clip(np.searchsorted(edges, value, side="right") - 1, 0, bins - 1))

    entries = []
    for j in range(bins + 1):
        if j < bins:
            theirs_rows = [r for r in published if bin_of(r["attn_coeff"]) == j]
            ours_rows = [r for r in ours if bin_of(r["attn_coeff"]) == j]
            label = f"{edges[j]:.3g}-{edges[j + 1]:.3g}"
        else:
            theirs_rows, ours_rows, label = published, ours, "all"
        entry = {"bin": label, "published_n": len(theirs_rows), "ours_n": len(ours_rows)}
        for side, rows in (("published", theirs_rows), ("ours", ours_rows)):
            for kind in MECHANISMS:
                n = sum(r["mechanism"] == kind for r in rows)
                entry[f"{side}_{kind}"] = n / len(rows) if rows else None
        for m in MEASURES:
            entry[f"ks_{m}"] = ks_distance(
                [r[m] for r in theirs_rows if r.get(m) is not None],
                [r[m] for r in ours_rows if r.get(m) is not None],
            )
        entries.append(entry)
    return entries


def table(entries: list[dict]) -> str:
    def share(v):
        return "" if v is None else f"{v:.0%}"

    def ks(v):
        return "" if v is None else f"{v:.2f}"

    lines = [
        "| attn_coeff | published n | clock | pizza | other | ours n | clock | pizza | other "
        "| KS gradient_sim | KS distance_irrelevance | KS circularity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        lines.append(
            f"| {e['bin']} | {e['published_n']} | {share(e['published_clock'])} | "
            f"{share(e['published_pizza'])} | {share(e['published_other'])} | {e['ours_n']} | "
            f"{share(e['ours_clock'])} | {share(e['ours_pizza'])} | {share(e['ours_other'])} | "
            + " | ".join(ks(e[f"ks_{m}"]) for m in MEASURES)
            + " |"
        )
    return "\n".join(lines)


def figure(published, ours, bins: int):
    """The two diagrams, one row per table, one column per mechanism."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flatformer.figures.atlas import draw_mechanism_fraction

    fig, axes = plt.subplots(2, 3, figsize=(16, 5.5))
    for row, (name, rows) in enumerate((("published", published), ("ours", ours))):
        diagram = phase_diagram(rows, bins=bins)
        for ax, kind in zip(axes[row], diagram["kinds"]):
            draw_mechanism_fraction(diagram, kind, ax)
            ax.set_title(f"{name}: fraction {kind}")
            ax.set_ylabel("")
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("published", type=Path)
    parser.add_argument("ours", type=Path)
    parser.add_argument("--bins", type=int, default=10)
    parser.add_argument("--all", action="store_true", help="keep every published row")
    parser.add_argument("--figure", type=Path, help="write the two diagrams here (PNG)")
    args = parser.parse_args(argv)
    published = read_published(args.published, args.all)
    ours = read_ours(args.ours)
    entries = compare(published, ours, args.bins)
    with record(__file__, "Our atlas beside the published table", markdown=True):
        setting = (
            "every row"
            if args.all
            else "the main setting (" + ", ".join(f"{k} {v}" for k, v in MAIN.items()) + ")"
        )
        print(
            f"Published: {len(published)} runs with measures, {setting}. Ours: {len(ours)} "
            f"runs of {args.ours.parent.name}. Shares of each mechanism per bin of attn_coeff "
            f"(one rule for both tables: analysis/mechanism.py's classify); KS: the two-sample "
            f"Kolmogorov-Smirnov distance between the tables' distributions of each measure.\n"
        )
        print(table(entries))
    if args.figure:
        from flatformer.store.write import atomic_write

        fig = figure(published, ours, args.bins)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        atomic_write(args.figure, buffer.getvalue())
    return entries


if __name__ == "__main__":
    main()
