"""Induction heads over many seeds: the attn-only-2l preset and its 1-layer control.

    python bench/induction.py [--seeds 0-9] [--set key=value ...]

Trains the seeds of each model as one batched run (into a temporary folder; the task's default
recipe), then prints one row per seed: held-out rule error, the layer-0 -> layer-1 pair of heads
with the largest K-composition (its value against the random baseline) and that pair's
previous-token and prefix-matching scores (the must-show: a previous-token head >= 0.8 and a
prefix-matching head >= 0.8 whose K-composition is the largest of all such pairs), the best
scores of each layer, the phase step, and the largest rise of the training loss between
checkpoints up to the phase step and over as many checkpoints after it (a bump stands out only
if the first is larger than the second, the optimiser's noise); then the counts the README
quotes, and the control's rule errors. Times are wall-clock and CPU seconds of each batched run
(on a busy machine the CPU seconds are the better guess at an idle machine's wall time).
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from flatformer.analysis.induction import head_scores, phase_change
from flatformer.training.jobs import build_job
from flatformer.store.runs import load_run
from flatformer.training.trainer import train

THRESHOLD = 0.8


def train_seeds(folder: Path, seeds: str, sets: list[str]):
    job, _ = build_job("induction", None, "default", 0, seeds, folder, sets)
    start, cpu = time.perf_counter(), time.process_time()
    train(job)
    return (
        [load_run(d) for d in job.out_dirs],
        (time.perf_counter() - start, time.process_time() - cpu),
    )


def largest_rise(losses) -> float:
    """The largest increase of the loss from one checkpoint to the next (0 if it only falls)."""
    return float(max(0.0, np.diff(losses).max())) if len(losses) > 1 else 0.0


def row(run) -> dict:
    scores = head_scores(run.model())
    (_, a), (_, b) = scores.strongest_k_pair()
    H = run.cfg.n_heads
    phase = phase_change(run)
    before = [x for s, x in zip(phase.steps, phase.train_loss) if s <= phase.phase_step]
    after = [x for s, x in zip(phase.steps, phase.train_loss) if s >= phase.phase_step]
    after = after[: len(before)]  # as many checkpoints as before
    return {
        "seed": run.config["seed"],
        "rule_error": run.metrics[-1]["rule_error"],
        "pair": f"0.{a}->1.{b}",
        "k": scores.composition["k"][a, H + b],
        "baseline": scores.baseline,
        "prev": scores.prev_token[0, a],
        "prefix": scores.prefix_matching[1, b],
        "best_prev": scores.prev_token[0].max(),
        "best_prefix": scores.prefix_matching[1].max(),
        "phase": phase.phase_step,
        "rise_before": largest_rise(before),
        "rise_after": largest_rise(after),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, seconds = train_seeds(Path(tmp) / "two", args.seeds, args.sets)
        control, control_seconds = train_seeds(
            Path(tmp) / "one", args.seeds, args.sets + ["n_layers=1"]
        )
        rows = [row(r) for r in runs]
        control_errors = [r.metrics[-1]["rule_error"] for r in control]
    cfg = runs[0].cfg
    print(
        f"attn-only-2l ({cfg.n_params} parameters), seeds {args.seeds}, "
        f"{runs[0].config['recipe']['steps']} steps: {seconds[0]:.0f} s batched "
        f"({seconds[1]:.0f} s CPU)"
    )
    print(
        f"{'seed':>4} {'rule err':>8} {'K pair':>8} {'K':>6} {'prev':>6} {'prefix':>6} "
        f"{'best prev':>9} {'best pre':>8} {'phase':>6} {'rise <':>7} {'rise >':>7}"
    )
    for r in rows:
        print(
            f"{r['seed']:>4} {r['rule_error']:>8.2%} {r['pair']:>8} {r['k']:>6.3f} "
            f"{r['prev']:>6.3f} {r['prefix']:>6.3f} {r['best_prev']:>9.3f} "
            f"{r['best_prefix']:>8.3f} {r['phase']:>6} {r['rise_before']:>7.3f} "
            f"{r['rise_after']:>7.3f}"
        )
    good = [r for r in rows if r["prev"] >= THRESHOLD and r["prefix"] >= THRESHOLD]
    print(
        f"seeds whose largest K-composition (layer 0 -> 1) joins a previous-token head >= "
        f"{THRESHOLD} and a prefix-matching head >= {THRESHOLD}: {len(good)} / {len(rows)}; "
        f"rule error <= 2%: {sum(r['rule_error'] <= 0.02 for r in rows)} / {len(rows)} "
        f"(median {np.median([r['rule_error'] for r in rows]):.2%}); random baseline of the "
        f"composition score {rows[0]['baseline']:.3f}; the training loss rises more before "
        f"the phase step than after it in {sum(r['rise_before'] > r['rise_after'] for r in rows)}"
        f" / {len(rows)}"
    )
    print(
        f"1-layer control ({control[0].cfg.n_params} parameters, {control_seconds[0]:.0f} s, "
        f"{control_seconds[1]:.0f} s CPU): "
        f"rule error median {np.median(control_errors):.1%}, best "
        f"{min(control_errors):.1%}, worst {max(control_errors):.1%}"
    )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "Induction heads forming"):
        main()
