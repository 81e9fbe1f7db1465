"""Zhong et al.'s main setting, trained here: which mechanism runs at attn_coeff 0 and 1 learn,
beside the published table's shares for those bins.

    python bench/atlas_paper.py PUBLISHED.csv [--atlas DIR] [--seeds 0-5] [--steps 4000]

PUBLISHED.csv is `result/1l_fixedwidth.csv` of the fjzzq2002/pizza repository (fetched by the
user; flatformer does not ship it). The atlas is the paper's main setting (p 59, d_model 128,
4 heads of 32, d_mlp 512, one layer, full batch, AdamW at lr 1e-3 with weight decay 2 and
betas 0.9, 0.98, 80% of the pairs) at attn_coeff 0 and 1, `--seeds` each, trained `--steps`
steps (the paper trains 20,000: see `bench/results/atlas_speed.md` for what that costs here)
with a checkpoint every 1,000. It runs with `flatformer atlas` into `--atlas` (resumed: jobs
already measured there are skipped), then every run is measured at every checkpoint, so the
table shows whether the classification has settled by the last.

One rule names the runs of both tables (analysis/mechanism.py's `classify`). For each attn_coeff
bin holding our runs (0-0.1 and 0.9-1), the published runs of that bin give each mechanism's
share q; with n runs of ours, the count of a mechanism is "within the spread" when it lies in
the central 95% of Binomial(n, q) (each tail at most 2.5%). Writes
bench/results/atlas_paper.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from atlas_published import MEASURES, compare, ks_distance, read_published  # noqa: E402
from atlas_speed import SPEC  # noqa: E402  (the paper's main setting, as that bench trains it)
from common import record  # noqa: E402

from flatformer.atlas import MECHANISMS, read_atlas, run_atlas, run_measures  # noqa: E402
from flatformer.store.runs import load_run  # noqa: E402
from flatformer.store.write import atomic_write  # noqa: E402

BINS = 10


def binomial_range(n: int, q: float, tail: float = 0.025) -> tuple[int, int]:
    """The central counts of Binomial(n, q): the smallest lo and largest hi whose tails below
    lo and above hi each hold at most `tail`."""
    pmf = [math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]
    lo, below = 0, 0.0
    while lo < n and below + pmf[lo] <= tail:
        below += pmf[lo]
        lo += 1
    hi, above = n, 0.0
    while hi > 0 and above + pmf[hi] <= tail:
        above += pmf[hi]
        hi -= 1
    return lo, hi


def measured_at(folder: Path, steps: list[int]) -> dict[int, list[dict]]:
    """Every run of the atlas measured at each checkpoint step: {step: rows}."""
    rows = read_atlas(folder / "results.csv")
    by_step: dict[int, list[dict]] = {s: [] for s in steps}
    for row in rows:
        run = load_run(folder / row["job"] / f"seed_{row['seed']}")
        for step in steps:
            m = run_measures(run, step)
            by_step[step].append({"attn_coeff": row["attn_coeff"], "seed": row["seed"], **m})
    return by_step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("published", type=Path)
    parser.add_argument("--atlas", type=Path, default=Path("runs/atlas-paper"))
    parser.add_argument("--seeds", default="0-5")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    published = read_published(args.published)
    args.atlas.mkdir(parents=True, exist_ok=True)
    spec = args.atlas / "paper.toml"
    atomic_write(
        spec,
        SPEC.format(
            seeds=args.seeds, steps=args.steps, checkpoint_every=1000, eval_every=500
        ).encode(),
    )
    rows, failed = run_atlas(spec, args.atlas, workers=args.workers, explore=0)
    if failed:
        raise SystemExit(f"atlas failed: {failed[0]}")
    # each job's CPU as it measured it (its seeds train batched), whenever it ran
    cpu = sum({r["job"]: r["job_cpu_seconds"] for r in rows}.values())
    steps = list(range(1000, args.steps + 1, 1000))
    by_step = measured_at(args.atlas, steps)
    last = by_step[steps[-1]]
    with record(__file__, "Zhong et al.'s main setting, trained here", markdown=True):
        print(
            f"Ours: {len(last)} runs (attn_coeff 0 and 1, seeds {args.seeds}) at the paper's "
            f"main setting, {args.steps:,} of its 20,000 steps: {cpu / 60:.0f} CPU-min in the "
            f"jobs, {len(last) / (cpu / 3600):.1f} runs per core-hour. Published: "
            f"{len(published)} runs of the main setting with measures (1l_fixedwidth.csv).\n"
        )
        print("Mechanism of each run at each checkpoint (clock / pizza / other):\n")
        print("| step | attn_coeff 0 | attn_coeff 1 |\n|---:|---|---|")
        for step in steps:
            cells = []
            for coeff in (0.0, 1.0):
                runs = [r for r in by_step[step] if r["attn_coeff"] == coeff]
                cells.append(
                    " / ".join(str(sum(r["mechanism"] == k for r in runs)) for k in MECHANISMS)
                )
            print(f"| {step:,} | {cells[0]} | {cells[1]} |")
        print(
            f"\nAt step {steps[-1]:,}, beside the published bins (central 95% of "
            "Binomial(n, published share) for our n runs):\n"
        )
        print(
            "| bin | published n | mechanism | published share | ours | central 95% | within |\n"
            "|---|---:|---|---:|---:|---|---|"
        )
        verdicts = []
        for entry in compare(published, last, BINS):
            n = entry["ours_n"]
            if not n or entry["bin"] == "all":
                continue
            for kind in MECHANISMS:
                q = entry[f"published_{kind}"]
                ours = round(entry[f"ours_{kind}"] * n)
                lo, hi = binomial_range(n, q)
                within = lo <= ours <= hi
                verdicts.append(within)
                print(
                    f"| {entry['bin']} | {entry['published_n']} | {kind} | {q:.0%} | "
                    f"{ours} of {n} | {lo}-{hi} | {'yes' if within else 'no'} |"
                )
        print("\nMedian of each measure in those bins, and the two-sample KS distance:\n")
        print("| bin | measure | published median | ours median | KS |\n|---|---|---:|---:|---:|")
        for lo_edge, hi_edge, coeff in ((0.0, 0.1, 0.0), (0.9, 1.0, 1.0)):
            theirs = [r for r in published if lo_edge <= r["attn_coeff"] <= hi_edge]
            ours = [r for r in last if r["attn_coeff"] == coeff]
            for m in MEASURES:
                a = [r[m] for r in theirs]
                b = [r[m] for r in ours]
                print(
                    f"| {lo_edge:g}-{hi_edge:g} | {m} | {np.median(a):.3f} | {np.median(b):.3f} | "
                    f"{ks_distance(a, b):.2f} |"
                )
        print(
            f"\nEvery count within the published spread: {'yes' if all(verdicts) else 'no'} "
            f"({sum(verdicts)} of {len(verdicts)})."
        )


if __name__ == "__main__":
    main()
