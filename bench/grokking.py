"""Grokking modular addition: `flatformer train modular-addition` for seeds 0-4, one at a time.

    python bench/grokking.py [--seeds 0-4] [--set key=value ...] [--step-only]

First the cost of one training step of the default model, in this process: the full forward and
backward passes against the path the trainer takes, which computes the last block only at `=`
(model.forward's `read`), each in float64 and float32 (CPU ms, and the ratio to the full pass in
float64).

Then each seed trains as the default command does (default preset and recipe, its own temporary
run folder) and prints one row: the step at which every training pair is right (memorised), the
first checkpoint at which 99% of the held-out pairs are right (grokked), the final held-out
accuracy, the key frequencies, the phases and where the restricted and test losses fall below
half their peak (analysis/grokking.py), and the seconds it took: wall time, and CPU time, which
is what an idle machine would take when the machine is shared (the training is single-threaded
but for NumPy's matrix products), with the machine's load average before and after.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from flatformer.analysis.grokking import progress
from flatformer.tasks.windows import TaskData
from flatformer.training.jobs import build_job, parse_seeds
from flatformer.engine.model import backward, cross_entropy, forward, init_params
from flatformer.store.runs import load_run
from flatformer.training.trainer import train

GROKKED = 0.99


def step_costs(folder: Path, sets: list[str], repeat: int = 20) -> None:
    """CPU ms of one full-batch step's forward and backward passes: every position, or only the
    positions the loss reads, in float64 and float32."""
    job, _ = build_job("modular-addition", None, None, 0, None, folder / "step", sets)
    data = TaskData.build(job.task, job.cfg.n_ctx, job.data_seed)
    inputs, targets, weights = data.train.windows(data.train_starts[None], job.cfg.n_ctx, False)
    read = np.flatnonzero(weights.any((0, 1)))
    costs = {}
    for dtype in ("float64", "float32"):
        params = init_params(job.cfg, [np.random.default_rng(0)], job.recipe.embed_init_scale)
        params = params.like(params.flat.astype(dtype))
        for name, at in (("every position", None), ("read positions", read)):

            def step():
                logits, cache = forward(params, inputs, read=at)
                pick = slice(None) if at is None else at
                backward(
                    params, cache, cross_entropy(logits, targets[..., pick], weights[..., pick])[1]
                )

            step()
            cpu = time.process_time()
            for _ in range(repeat):
                step()
            costs[name, dtype] = (time.process_time() - cpu) / repeat * 1e3
    base = costs["every position", "float64"]
    for (name, dtype), ms in costs.items():
        print(f"step, {name:>14s}, {dtype}: {ms:6.1f} ms CPU ({base / ms:.1f}x)")


def measure(seed: int, folder: Path, sets: list[str]) -> dict:
    job, out = build_job("modular-addition", None, None, seed, None, folder / f"seed{seed}", sets)
    wall, cpu = time.perf_counter(), time.process_time()
    train(job)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    g = progress(load_run(out))
    steps, train_acc, test_acc = g["steps"], g["train_accuracy"], g["test_accuracy"]
    first = lambda values, at: next((s for s, v in zip(steps, values) if v >= at), None)  # noqa
    return {
        "seed": seed,
        "memorised": first(train_acc, 1.0),
        "grokked": first(test_acc, GROKKED),
        "final": test_acc[-1],
        "keys": g["key_frequencies"],
        "share": g["key_share"],
        "phases": g["phases"],
        "falls": g["falls"],
        "algorithm": g["algorithm"]["name"],
        "wall": wall,
        "cpu": cpu,
        "steps": job.recipe.steps,
        "cfg": job.cfg,
        "p": job.task.p,
        "fraction": job.task.train_fraction,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--step-only", action="store_true", help="only the cost of one step")
    args = parser.parse_args()
    rows = []
    print("load average (1, 5, 15 min) before: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        step_costs(Path(tmp), args.sets)
        if args.step_only:
            return
        for seed in parse_seeds(args.seeds):
            r = measure(seed, Path(tmp), args.sets)
            if not rows:
                print(
                    f"p = {r['p']}, {r['fraction']:.0%} of pairs train, {r['cfg'].n_params:,} "
                    f"parameters, {r['steps']:,} full-batch steps"
                )
                print(
                    f"{'seed':>4s} {'memorised':>9s} {'grokked':>8s} {'final':>7s} "
                    f"{'wall s':>7s} {'cpu s':>6s}  {'restricted/test halved':>24s}  "
                    f"{'phases end':>16s}  key frequencies (share)"
                )
            rows.append(r)
            falls = f"{r['falls']['restricted_loss']}/{r['falls']['test_loss']}"
            phases = "/".join(str(v) for v in r["phases"].values())
            print(
                f"{r['seed']:>4d} {str(r['memorised']):>9s} {str(r['grokked']):>8s} "
                f"{r['final']:>7.2%} {r['wall']:>7.1f} {r['cpu']:>6.1f}  {falls:>24s}  "
                f"{phases:>16s}  {r['keys']} ({r['share']:.0%}) {r['algorithm']}",
                flush=True,
            )
    ok = [
        r
        for r in rows
        if r["grokked"]
        and r["final"] >= GROKKED
        and r["memorised"]
        and r["memorised"] < r["grokked"]
    ]
    print(
        f"{len(ok)} of {len(rows)} seeds grokked (memorised first, >= {GROKKED:.0%} held-out "
        f"at the end); CPU seconds max {max(r['cpu'] for r in rows):.1f}, wall seconds max "
        f"{max(r['wall'] for r in rows):.1f}; load average after: "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "Grokking modular addition"):
        main()
