"""Attribution graphs against the circuit that is really there.

    python bench/graph_truth.py [--prompts N] [--runs PAPER,INDUCTION]

Two models whose circuit exhaustive edge ablation finds (flatformer/edges): the paper's model
(plus-last-even on paper-2d, the default `flatformer train`) and the induction model
(attn-only-2l), each trained here with its task's defaults unless --runs gives the run folders.
The truth: every edge's exact effect under mean ablation, the task's default metric, 200
held-out prompts, and the greedy circuit (95% faithfulness). The graph: per-layer transcoders
trained with `flatformer graph`'s defaults, then one attribution graph per prompt (the first N
of the same prompts, cut after the position the metric reads), pruned at node 0.8 / edge 0.98,
its kept edges split by the heads they pass through (flatformer/graph/truth.py). Scored: ROC-AUC
of the graph's mean score per truth edge, precision and recall of the edges it keeps on at least
half the prompts, without and with the QK attributions (the frozen attention gives q and k
edges no score; QK attributions do), and the heads, MLPs and embeddings each side touches.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: the cores are shared
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import record  # noqa: E402
from flatformer.tasks.windows import TaskData  # noqa: E402
from flatformer.edges.methods import build_problem, find_circuits, prompts_for  # noqa: E402
from flatformer.graph.transcoders import mlp_layers, train_transcoders  # noqa: E402
from flatformer.graph.truth import components, edge_scores, score  # noqa: E402
from flatformer.training.jobs import JobSpec  # noqa: E402
from flatformer.store.runs import load_run  # noqa: E402
from flatformer.training.trainer import train  # noqa: E402

TASKS = (("plus-last-even", None), ("induction", None))


def trained(task: str, folder: Path):
    job, out = JobSpec(task, None, "default", out_dir=folder / task).build()
    train(job)
    return out


def measure(run_dir, n_prompts: int) -> dict:
    run = load_run(run_dir)
    model, task = run.model(), run.task
    data = TaskData.build(task, run.cfg.n_ctx, run.config.get("data_seed", 0))
    start = time.perf_counter()
    truth = find_circuits(build_problem(model, task, data, "mean"), methods=("exact",))
    truth_seconds = time.perf_counter() - start
    fvu = []
    transcoders = []
    if mlp_layers(run.cfg):
        transcoders, metrics = train_transcoders(run)
        fvu = [m["fvu"] for m in metrics]
    tokens, index, _ = prompts_for(task, data, n_prompts)
    edges = [(e["src"], e["dst"]) for e in truth["edges"]]
    plain, with_qk = [], []
    start = time.perf_counter()
    for row, i in zip(tokens, index):
        a, b = edge_scores(model, transcoders, row[: i + 1], edges)
        plain.append(a)
        with_qk.append(b)
    graph_seconds = (time.perf_counter() - start) / len(tokens)
    return {
        "task": task.name,
        "preset": run.config.get("preset", ""),
        "truth": truth,
        "plain": score(truth, plain),
        "qk": score(truth, with_qk),
        "fvu": fvu,
        "prompts": len(tokens),
        "truth_seconds": truth_seconds,
        "graph_seconds": graph_seconds,
    }


def fmt(x):
    return "-" if x != x else f"{x:.2f}"  # nan


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--runs", default=None, help="run folders, comma-separated")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        record(__file__, "Attribution graphs against exhaustive edge ablation", markdown=True),
    ):
        runs = args.runs.split(",") if args.runs else [trained(t, Path(tmp)) for t, _ in TASKS]
        results = [measure(r, args.prompts) for r in runs]
        print(
            "| task | truth: circuit / edges | graph AUC, precision, recall "
            "| with QK: AUC, precision, recall | transcoder FVU | s per prompt (graph, head splits, QK) |"
        )
        print("|---|---|---|---|---|---|")
        for r in results:
            p, q, c = r["plain"], r["qk"], r["truth"]["circuit"]
            print(
                f"| {r['task']} | {c['edges_kept']} / {c['edges_total']} "
                f"| {fmt(p['auc'])}, {fmt(p['precision'])}, {fmt(p['recall'])} "
                f"| {fmt(q['auc'])}, {fmt(q['precision'])}, {fmt(q['recall'])} "
                f"| {', '.join(f'{x:.3f}' for x in r['fvu']) or 'no MLP'} "
                f"| {r['graph_seconds']:.2f} |"
            )
        print()
        for r in results:
            truth_edges = [f"{a}>{b}" for a, b in r["truth"]["circuit"]["edges"]]
            print(
                f"**{r['task']}** ({r['prompts']} prompts; truth's metric {r['truth']['metric']}):"
            )
            print()
            print(f"- the truth's circuit: `{', '.join(truth_edges)}`")
            for key, label in (("plain", "the graph"), ("qk", "the graph with QK")):
                s = r[key]
                print(
                    f"- {label} misses `{', '.join(s['missed']) or 'nothing'}`; "
                    f"keeps beyond the circuit `{', '.join(s['extra']) or 'nothing'}`"
                )
            for key, label in (("plain", "the graph"), ("qk", "the graph with QK")):
                print(
                    f"- components {label} touches: {sorted(components(r[key]['kept_edges']))}; "
                    f"the truth's: {sorted(components(truth_edges))}"
                )
            print()


if __name__ == "__main__":
    main()
