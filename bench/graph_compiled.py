"""Attribution graphs against the circuits of compiled programs, known by construction.

    python bench/graph_compiled.py [--prompts N] [--steps N]

Each program of tracr's library is compiled (flatformer/rasp) into a model whose circuit is
read off its weights (rasp/circuit.py: a sender feeds a receiver exactly when it writes a
direction the receiver reads). A ReLU transcoder per MLP that writes anything, `flatformer
graph`'s width and L1, is trained on every input up to max_len; then one attribution graph per
input (the first N inputs), pruned at node 0.8 / edge 0.98, its kept edges split by the heads
they pass through (graph/truth.py). Scored as bench/graph_truth.py scores against exhaustive
ablation: ROC-AUC of the graph's mean score per edge for membership in the known circuit, and
the precision and recall of the edges it keeps on at least half of the inputs, without and with
the QK attributions.
"""

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: the cores are shared
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from common import record  # noqa: E402
from flatformer.edges.graph import EdgeGraph  # noqa: E402
from flatformer.graph.transcoders import fit_transcoders  # noqa: E402
from flatformer.graph.truth import edge_scores, score  # noqa: E402
from flatformer.model.transformer import Transformer  # noqa: E402
from flatformer.rasp import library as lib  # noqa: E402
from flatformer.rasp import rasp  # noqa: E402
from flatformer.rasp.circuit import known_edges  # noqa: E402
from flatformer.rasp.compile import compile_rasp_to_model  # noqa: E402

PROGRAMS = [
    ("reverse", lambda: lib.make_reverse(rasp.tokens), [1, 2, 3], 4),
    ("hist", lib.make_hist, [1, 2, 3], 4),
    ("frac_prevs", lambda: lib.make_frac_prevs(rasp.tokens == "x"), ["x", "y"], 5),
    ("sort_unique", lambda: lib.make_sort_unique(rasp.tokens, rasp.tokens), [1, 2, 3], 4),
    ("count", lambda: lib.make_count(rasp.tokens, "a"), ["a", "b", "c"], 4),
]


def measure(name, make, vocab, max_len, n_prompts, steps):
    compiled = compile_rasp_to_model(make(), vocab, max_len)
    model = Transformer(compiled.cfg, compiled.tensors)
    inputs = np.array([compiled.encode(xs) for xs in itertools.product(vocab, repeat=max_len)])
    layers = [L for L in range(compiled.cfg.n_layers) if f"blocks.{L}.mlp" in compiled.mlps]
    transcoders, fvu = fit_transcoders(model, inputs, layers, steps=steps)
    known = {tuple(e) for e in known_edges(model)}
    edges = EdgeGraph(model).edges
    truth = {"edges": [{"src": s, "dst": d, "in_circuit": (s, d) in known} for s, d in edges]}
    pick = np.random.default_rng(0).permutation(len(inputs))[:n_prompts]
    start = time.perf_counter()
    plain, with_qk = zip(*(edge_scores(model, transcoders, inputs[i], edges) for i in pick))
    seconds = (time.perf_counter() - start) / len(pick)
    return {
        "name": name,
        "known": len(known),
        "edges": len(edges),
        "plain": score(truth, list(plain)),
        "qk": score(truth, list(with_qk)),
        "fvu": fvu,
        "prompts": len(pick),
        "seconds": seconds,
    }


def fmt(x):
    return "-" if x != x else f"{x:.2f}"  # nan


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with record(__file__, "Attribution graphs against compiled programs' circuits", markdown=True):
        results = [measure(*p, args.prompts, args.steps) for p in PROGRAMS]
        print(
            "| program | known circuit / edges | graph AUC, precision, recall "
            "| with QK: AUC, precision, recall | transcoder FVU | s per input |"
        )
        print("|---|---|---|---|---|---|")
        for r in results:
            p, q = r["plain"], r["qk"]
            print(
                f"| {r['name']} | {r['known']} / {r['edges']} "
                f"| {fmt(p['auc'])}, {fmt(p['precision'])}, {fmt(p['recall'])} "
                f"| {fmt(q['auc'])}, {fmt(q['precision'])}, {fmt(q['recall'])} "
                f"| {', '.join(f'{x:.3f}' for x in r['fvu']) or 'no MLP'} "
                f"| {r['seconds']:.2f} |"
            )
        print()
        for r in results:
            q = r["qk"]
            print(
                f"- **{r['name']}** ({r['prompts']} inputs): with QK the graph misses "
                f"`{', '.join(q['missed']) or 'nothing'}` and keeps beyond the circuit "
                f"`{', '.join(q['extra']) or 'nothing'}`"
            )


if __name__ == "__main__":
    main()
