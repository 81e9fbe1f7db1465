"""Clock or pizza at Zhong et al.'s main setting: seeds trained at attention rates 1 and 0.

    python bench/clock_pizza.py [--seeds 0-1] [--coeffs 1.0,0.0] [--steps 500] [--set k=v ...]

The model of "The Clock and the Pizza" (Zhong et al. 2023): modular addition at p = 59, 80% of
the pairs training, one block of d_model 128 with 4 heads of 32 and a 512-unit ReLU MLP (their
d_mlp = 4 d_model), full batch. The recipe is flatformer's `grokking` (AdamW, weight decay 1,
lr 3e-3, float32) cut to `--steps`, far cheaper than the paper's 20,000 epochs at lr 1e-3 and
weight decay 2: a budget probe, not a replication. Per attention rate, all seeds train together
as one batched job (as an atlas batches runs of one shape); then each seed's held-out accuracy
and its mechanism measures (analysis/mechanism.py). The seconds are the job's wall and CPU time
and the CPU time per run (the job's over its seeds), with the machine's load average.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

from flatformer.analysis.mechanism import mechanism_measures
from flatformer.jobs import build_job, parse_seeds
from flatformer.runs import load_run
from flatformer.train import train

PAPER = [
    "p=59",
    "train_fraction=0.8",
    "d_model=128",
    "n_heads=4",
    "d_head=32",
    "d_mlp=512",
]


def held_out_accuracy(run) -> float:
    """The last evaluation's held-out accuracy, 1 - rule error."""
    rows = [row for row in run.metrics if row.get("rule_error") is not None]
    return 1.0 - rows[-1]["rule_error"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-1")
    parser.add_argument("--coeffs", default="1.0,0.0")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    print("load average (1, 5, 15 min) before: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"{', '.join(PAPER)}, {args.steps} full-batch steps of the grokking recipe; {args.sets}")
    print(
        f"{'attn_coeff':>10s} {'seed':>4s} {'held out':>8s} {'gradient_sim':>12s} "
        f"{'distance_irr':>12s} {'circularity':>11s} {'kind':>6s}  key frequencies"
    )
    timings = []
    with tempfile.TemporaryDirectory() as tmp:
        for coeff in (float(c) for c in args.coeffs.split(",")):
            sets = [*PAPER, f"steps={args.steps}", f"attn_coeff={coeff}", *args.sets]
            out = Path(tmp) / f"c{coeff}"
            job, _ = build_job("modular-addition", None, None, 0, args.seeds, out, sets)
            wall, cpu = time.perf_counter(), time.process_time()
            train(job)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            timings.append((coeff, wall, cpu, job.cfg.n_params))
            for seed, folder in zip(seeds, job.out_dirs):
                run = load_run(folder)
                m = mechanism_measures(run.model(), run.cfg, job.task)
                print(
                    f"{coeff:>10.2f} {seed:>4d} {held_out_accuracy(run):>8.2%} "
                    f"{m['gradient_sim']:>12.3f} {m['distance_irrelevance']:>12.3f} "
                    f"{m['circularity']:>11.3f} {m['kind']:>6s}  {m['key_frequencies']}",
                    flush=True,
                )
    print()
    print(f"{'attn_coeff':>10s} {'params':>8s} {'wall s':>7s} {'cpu s':>7s} {'cpu s/run':>9s}")
    for coeff, wall, cpu, n in timings:
        print(f"{coeff:>10.2f} {n:>8,d} {wall:>7.1f} {cpu:>7.1f} {cpu / len(seeds):>9.1f}")
    print("load average after: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "Clock or pizza at the paper's setting"):
        main()
