"""Every registered task trained with its default preset and recipe: the rule error it reaches.

    python bench/tasks_table.py [--tasks a,b] [--seeds 0-3] [--preset NAME] [--set key=value]

Each task trains seeds 0-3 as one batched run (into a temporary folder) and prints one row: its
vocabulary, preset and parameter count, the steps, each seed's final held-out rule error, their
median (the number in the task's docstring and `measured_error`), the error of the best constant
guess (what a model that ignores its input reaches), the claim, the median training loss, the
step from which every seed stays within 1 point of its final rule error, and the wall time.
`--preset` and `--set` try other models, to find the smallest preset that learns a task.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from flatformer.training.jobs import build_job
from flatformer.tasks.windows import TaskData
from flatformer.tasks import TASKS, get_task
from flatformer.training.trainer import train


def constant_guess_error(task, n_ctx: int = 8) -> float:
    """Rule error of the best input-independent answer: one token, predicted everywhere."""
    data = TaskData.build(task, n_ctx)
    return 1.0 - data.rule_allowed.mean(0).max()


def measure(name: str, folder: Path, seeds: str, preset: str | None, sets: list[str]) -> dict:
    task = get_task(name)
    defaults = [f"{k}={json.dumps(v)}" for k, v in task.defaults.items()]
    job, _ = build_job(name, preset, "default", 0, seeds, folder / name, defaults + sets)
    start = time.perf_counter()
    trainer = train(job)
    errors = np.array([m[-1]["rule_error"] for m in trainer.metrics])
    losses = np.array([m[-1]["train_loss"] for m in trainer.metrics])
    curves = np.array([[row["rule_error"] for row in m] for m in trainer.metrics])  # (S, E)
    steps = [row["step"] for row in trainer.metrics[0]]
    off = np.abs(curves - errors[:, None]).max(0) > 0.01
    settled = steps[int(np.flatnonzero(off)[-1]) + 1] if off.any() else 0
    label = task.model_label() if preset is None else preset
    return {
        "task": task,
        "preset": label,
        "params": job.cfg.n_params,
        "steps": job.recipe.steps,
        "errors": errors,
        "median": float(np.median(errors)),
        "train_loss": float(np.median(losses)),
        "settled": settled,
        "seconds": time.perf_counter() - start,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # modular-addition trains full-batch for minutes per seed: bench/grokking.py measures it.
    parser.add_argument("--tasks", default=",".join(t for t in TASKS if t != "modular-addition"))
    parser.add_argument("--seeds", default="0-3")
    parser.add_argument("--preset", default=None)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    print(
        f"{'task':16s} {'V':>3s} {'preset':27s} {'params':>6s} {'steps':>6s}  "
        f"{'rule error per seed':28s} {'median':>7s} {'constant':>8s} {'claimed':>8s} "
        f"{'train loss':>10s} {'settled':>7s} {'time':>6s}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks.split(","):
            r = measure(name, Path(tmp), args.seeds, args.preset, args.sets)
            task = r["task"]
            claimed = "-" if task.measured_error is None else f"{task.measured_error:.1%}"
            per_seed = " ".join(f"{e:6.1%}" for e in r["errors"])
            print(
                f"{name:16s} {len(task.vocab):3d} {r['preset']:27s} {r['params']:6d} "
                f"{r['steps']:6d}  {per_seed:28s} {r['median']:7.1%} "
                f"{constant_guess_error(task):8.1%} {claimed:>8s} {r['train_loss']:10.3f} "
                f"{r['settled']:7d} {r['seconds']:5.0f}s",
                flush=True,
            )


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    with record(__file__, "Every task: its smallest model and the rule error it reaches"):
        main()
