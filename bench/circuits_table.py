"""Circuits of every task: each task trained (seed 0, its default preset and recipe), then every
edge's exact effect, the greedy circuit and EAP, EAP-IG and ACDC scored against the exact
effects (mean ablation, the task's default metric, 200 held-out prompts).

    python bench/circuits_table.py [--tasks a,b] [--ablation mean] [--steps N]

One row per task: edges in the graph, edges the circuit keeps and its faithfulness, whether it
is minimal, each method's ROC-AUC (recovering the circuit's edges from its scores) and Spearman
correlation with the exact effects, ACDC's circuit size and faithfulness, and seconds per
method. Times are wall-clock seconds in this one process: compare them within a row (the exact
effects of every edge are the reference each fast method is meant to undercut).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from flatformer.tasks.windows import TaskData
from flatformer.edges.methods import build_problem, find_circuits
from flatformer.training.jobs import build_job
from flatformer.store.runs import load_run
from flatformer.tasks import TASKS, get_task
from flatformer.training.trainer import train


def fmt(x, spec=".2f"):
    return "  -" if x is None else format(x, spec)


def measure(name: str, folder: Path, ablation: str, steps: int | None) -> dict:
    task = get_task(name)
    sets = [f"{k}={json.dumps(v)}" for k, v in task.defaults.items()]
    sets += [f"steps={steps}"] if steps else []
    job, out = build_job(name, None, "default", 0, None, folder / name, sets)
    train(job)
    run = load_run(out)
    data = TaskData.build(run.task, run.cfg.n_ctx)
    error = run.metrics[-1]["rule_error"]
    problem = build_problem(run.model(), run.task, data, ablation)
    return {
        "task": name,
        "preset": task.model_label(),
        "rule_error": error,
        **find_circuits(problem, ig_steps=5),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--ablation", default="mean")
    parser.add_argument("--steps", type=int, default=None, help="training steps [recipe's]")
    args = parser.parse_args()
    print(
        "| task | model | rule error | metric | edges | circuit | faithful | minimal "
        "| EAP AUC / rho | EAP-IG AUC / rho | ACDC AUC, edges, faithful "
        "| s exact / EAP / EAP-IG / ACDC |"
    )
    print("|" + " --- |" * 12, flush=True)
    notes = []  # after the table: a line between its rows would end it
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks.split(","):
            start = time.perf_counter()
            r = measure(name, Path(tmp), args.ablation, args.steps)
            m, c = r["methods"], r["circuit"]
            print(
                f"| {name} | {r['preset']} | {r['rule_error']:.1%} | {r['metric']} "
                f"| {c['edges_total']} | {c['edges_kept']} | {fmt(c['faithfulness'])} "
                f"| {'yes' if c['minimal'] else 'no'} "
                f"| {fmt(m['eap']['auc'])} / {fmt(m['eap']['spearman'])} "
                f"| {fmt(m['eap_ig']['auc'])} / {fmt(m['eap_ig']['spearman'])} "
                f"| {fmt(m['acdc']['auc'])}, {m['acdc']['edges_kept']}, "
                f"{fmt(m['acdc']['faithfulness'])} "
                f"| {m['exact']['seconds']:.2f} / {m['eap']['seconds']:.2f} / "
                f"{m['eap_ig']['seconds']:.2f} / {m['acdc']['seconds']:.2f} |",
                flush=True,
            )
            edges = ",".join(f"{src}>{dst}" for src, dst in c["edges"])
            notes.append(
                f"- {name}: clean {r['clean_metric']:.3f}, ablated {r['ablated_metric']:.3f}, "
                f"circuit `{edges}`, {time.perf_counter() - start:.0f} s with training"
            )
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    from common import record  # bench/, the script's own folder

    title = "Circuits of every task, and the fast methods scored against them"
    with record(__file__, title, markdown=True):
        main()
