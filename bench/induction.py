"""Induction heads over many seeds: the attn-only-2l preset and its 1-layer control.

    python bench/induction.py [--seeds 0-9] [--set key=value ...]

Trains the seeds of each model as one batched run (into a temporary folder; the task's default
recipe), then prints one row per seed: held-out rule error, the best previous-token head of
layer 0 and its score, the best prefix-matching head of a later layer and its score, whether
their K-composition is the largest of all layer-0 -> layer-1 pairs (and its value against the
random baseline), the phase step and the loss bump before it; then the counts the README
quotes, and the control's rule errors. Times are wall-clock and CPU seconds of each batched run
(on a busy machine the CPU seconds are the better guess at an idle machine's wall time).
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from flatformer.analysis.induction import head_scores, phase_change
from flatformer.jobs import build_job
from flatformer.runs import load_run
from flatformer.train import train

THRESHOLD = 0.8


def train_seeds(folder: Path, seeds: str, sets: list[str]):
    job, _ = build_job("induction", None, "default", 0, seeds, folder, sets)
    start, cpu = time.perf_counter(), time.process_time()
    train(job)
    return ([load_run(d) for d in job.out_dirs],
            (time.perf_counter() - start, time.process_time() - cpu))


def row(run) -> dict:
    scores = head_scores(run.model())
    (_, a), (lb, b) = scores.induction_pair()
    H = run.cfg.n_heads
    k = scores.composition["k"][:H, H:2 * H]             # layer 0 -> layer 1 pairs
    phase = phase_change(run)
    return {"seed": run.config["seed"], "rule_error": run.metrics[-1]["rule_error"],
            "prev_head": f"0.{a}", "prev": scores.prev_token[0, a],
            "induction_head": f"{lb}.{b}", "prefix": scores.prefix_matching[lb, b],
            "k_largest": lb == 1 and np.nanargmax(k) == a * H + b,
            "k": scores.composition["k"][a, lb * H + b], "baseline": scores.baseline,
            "phase": phase.phase_step, "bump": phase.bump_step}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, seconds = train_seeds(Path(tmp) / "two", args.seeds, args.sets)
        control, control_seconds = train_seeds(Path(tmp) / "one", args.seeds,
                                               args.sets + ["n_layers=1"])
        rows = [row(r) for r in runs]
        control_errors = [r.metrics[-1]["rule_error"] for r in control]
    cfg = runs[0].cfg
    print(f"attn-only-2l ({cfg.n_params} parameters), seeds {args.seeds}, "
          f"{runs[0].config['recipe']['steps']} steps: {seconds[0]:.0f} s batched "
          f"({seconds[1]:.0f} s CPU)")
    print(f"{'seed':>4} {'rule err':>8} {'prev head':>9} {'score':>6} {'ind head':>8} "
          f"{'score':>6} {'K largest':>9} {'K':>6} {'phase':>6} {'bump':>6}")
    for r in rows:
        print(f"{r['seed']:>4} {r['rule_error']:>8.2%} {r['prev_head']:>9} {r['prev']:>6.3f} "
              f"{r['induction_head']:>8} {r['prefix']:>6.3f} {str(r['k_largest']):>9} "
              f"{r['k']:>6.3f} {r['phase']:>6} {str(r['bump']):>6}")
    good = [r for r in rows if r["prev"] >= THRESHOLD and r["prefix"] >= THRESHOLD
            and r["k_largest"]]
    print(f"seeds with a previous-token head >= {THRESHOLD}, a prefix-matching head >= "
          f"{THRESHOLD} and their K-composition the largest 0 -> 1 pair: {len(good)} / "
          f"{len(rows)}; rule error <= 2%: {sum(r['rule_error'] <= 0.02 for r in rows)} / "
          f"{len(rows)} (median {np.median([r['rule_error'] for r in rows]):.2%}); random "
          f"baseline of the composition score {rows[0]['baseline']:.3f}")
    print(f"1-layer control ({control[0].cfg.n_params} parameters, {control_seconds[0]:.0f} s, "
          f"{control_seconds[1]:.0f} s CPU): "
          f"rule error median {np.median(control_errors):.1%}, best "
          f"{min(control_errors):.1%}, worst {max(control_errors):.1%}")


if __name__ == "__main__":
    main()
