"""How long an attribution graph takes on one core.

    python bench/graph_speed.py [--repeats N]

Models: the paper's (plus-last-even on paper-2d, the default `flatformer train`; its context is
8 tokens, so its prompt is 8), the same plane model with two blocks and a 20-token context
(plus-last-even, 3,000 steps), and the simulator model (simulator-16d: LayerNorm, GELU, two
heads, W_O) with two blocks and a 20-token context (3,000 steps); each with transcoders trained
with `flatformer graph`'s defaults. Timed: the graph (attribute: the replacement model and
every edge) and pruning, median of N, on a held-out prompt of the full context; against the
same edges computed one replacement pass per source node (the ablation loop the tests check
the graph with), in the same process.

circuit-tracer (the reference a user would pick) pins older huggingface-hub and transformers
than flatformer's environment has: bench/graph_circuit_tracer.py runs it, in one of its own, on
the simulator model, and times both there.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from common import record  # noqa: E402
from flatformer.graph import attribute, train_transcoders  # noqa: E402
from flatformer.graph.prune import prune  # noqa: E402
from flatformer.graph.replacement import Replacement  # noqa: E402
from flatformer.training.jobs import JobSpec  # noqa: E402
from flatformer.store.runs import load_run  # noqa: E402
from flatformer.training.trainer import train  # noqa: E402

MODELS = [
    ("paper-2d", None, {}),
    ("paper-2d-2layer, n_ctx 20", "paper-2d-2layer", {"n_ctx": 20, "steps": 3000}),
    (
        "simulator-16d, 2 blocks, n_ctx 20",
        "simulator-16d",
        {"n_ctx": 20, "n_layers": 2, "steps": 3000},
    ),
]


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def one_pass_per_source(model, transcoders, tokens, graph):
    """Every edge as its own ablation: n_sources + 1 replacement passes of one sequence."""
    rep = Replacement(model, transcoders, tokens)
    base = np.ones(rep.n_sources)
    for s in range(rep.n_sources):
        coef = base.copy()
        coef[s] = 0.0
        logits, cache = rep.run(coef)
        rep.feature_inputs(cache)
        rep.logit_inputs(logits, graph.logit_tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        record(__file__, "Attribution graph speed", markdown=True),
    ):
        print(
            "| model | prompt tokens | features | edges | graph s | prune s "
            "| one pass per source s | ratio |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for label, preset, sets in MODELS:
            job, out = JobSpec(
                "plus-last-even",
                preset,
                "default",
                out_dir=Path(tmp) / label.split(",")[0],
                overrides=sets,
            ).build()
            train(job)
            run = load_run(out)
            transcoders, _ = train_transcoders(run)
            model = run.model()
            tokens = np.asarray(run.data().val_inputs)[0]
            graph = attribute(model, transcoders, tokens)
            t_graph = median_time(lambda: attribute(model, transcoders, tokens), args.repeats)
            t_prune = median_time(lambda: prune(graph), args.repeats)
            t_loop = median_time(lambda: one_pass_per_source(model, transcoders, tokens, graph), 1)
            print(
                f"| {label} | {len(tokens)} | {graph.n_features} "
                f"| {int((graph.adjacency != 0).sum())} | {t_graph:.4f} | {t_prune:.4f} "
                f"| {t_loop:.3f} | {t_loop / t_graph:.0f}x |"
            )
        print()
        print(
            "Times are wall-clock medians in one process on one BLAS thread. circuit-tracer, the "
            "reference a user would pick, needs an environment of its own (huggingface-hub < 1.0, "
            "transformers <= 4.57.3); bench/graph_circuit_tracer.py times both on one model there."
        )


if __name__ == "__main__":
    main()
