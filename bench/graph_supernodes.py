"""Supernodes against the variables of compiled programs.

    python bench/graph_supernodes.py [--steps N]

Compiled RASP programs (flatformer/rasp) whose MLPs compute a categorical variable: each value
of the variable is a named residual direction ("hist:2"), so an MLP's output is known, value
by value. Per program: a transcoder per MLP (ReLU, `flatformer graph`'s width and L1, trained on
every input up to max_len), then one attribution graph per input, its kept features grouped
into supernodes by decoder direction (cos >= 0.9), each feature's role the residual direction
its decoder row writes most. Scored by pairs of kept features (supernodes.pair_agreement):
precision (grouped pairs sharing a role), recall (pairs sharing a role grouped), averaged over
inputs; and the transcoders' FVU on those inputs.
"""

import argparse
import itertools
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from common import record  # noqa: E402
from flatformer.graph import attribute  # noqa: E402
from flatformer.graph.prune import prune  # noqa: E402
from flatformer.graph.supernodes import decoder_groups, pair_agreement  # noqa: E402
from flatformer.graph.transcoders import fit_transcoders  # noqa: E402
from flatformer.rasp import library as lib  # noqa: E402
from flatformer.rasp import rasp  # noqa: E402
from flatformer.rasp.compile import compile_rasp_to_model  # noqa: E402
from flatformer.model.transformer import Transformer  # noqa: E402

PROGRAMS = [
    ("hist", lib.make_hist, [1, 2, 3, 4], 4),
    ("sort_unique", lambda: lib.make_sort_unique(rasp.tokens, rasp.tokens), [1, 2, 3, 4], 4),
    (
        "sort",
        lambda: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=4, min_key=1),
        [1, 2, 3, 4],
        4,
    ),
]


def measure(name, make, vocab, max_len, steps):
    compiled = compile_rasp_to_model(make(), vocab, max_len)
    model = Transformer(compiled.cfg, compiled.tensors)
    inputs = np.array([compiled.encode(xs) for xs in itertools.product(vocab, repeat=max_len)])
    layers = [L for L in range(compiled.cfg.n_layers) if f"blocks.{L}.mlp" in compiled.mlps]
    transcoders, fvu = fit_transcoders(model, inputs, layers, steps=steps)  # not empty MLPs
    by_layer = {tc.layer: tc for tc in transcoders}
    precision, recall, sizes = [], [], []
    for tokens in inputs:
        graph = attribute(model, transcoders, tokens)
        pruned = prune(graph)
        groups = decoder_groups(graph, pruned.node_mask, transcoders)
        roles = {}
        for i in np.flatnonzero(pruned.node_mask[: graph.n_features]):
            L, _, idx = graph.features[i]
            roles[int(i)] = compiled.residual[int(np.argmax(np.abs(by_layer[L].W_dec[idx])))]
        score = pair_agreement(groups, roles)
        precision.append(score["precision"])
        recall.append(score["recall"])
        sizes.append(len(roles))
    return {
        "program": name,
        "mlps": ", ".join(f"{k} computes {v[0][0]}" for k, v in compiled.mlps.items()),
        "inputs": len(inputs),
        "fvu": fvu,
        "features": float(np.mean(sizes)),
        "precision": float(np.nanmean(precision)) if not np.isnan(precision).all() else None,
        "recall": float(np.nanmean(recall)) if not np.isnan(recall).all() else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with record(__file__, "Supernodes against compiled programs' variables", markdown=True):
        print(
            "| program | MLPs | inputs | transcoder FVU | kept features per graph "
            "| pair precision | pair recall |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, make, vocab, max_len in PROGRAMS:
            r = measure(name, make, vocab, max_len, args.steps)
            fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            print(
                f"| {r['program']} | {r['mlps']} | {r['inputs']} "
                f"| {', '.join(f'{x:.3f}' for x in r['fvu'])} | {r['features']:.1f} "
                f"| {fmt(r['precision'])} | {fmt(r['recall'])} |"
            )
        print()
        print(
            "A feature's role: the residual direction (variable:value) its decoder row writes "
            "most. Precision: of the pairs of kept features a supernode joins, the share with one "
            "role; recall: of the pairs with one role, the share a supernode joins (- where no "
            "pair was there to count)."
        )


if __name__ == "__main__":
    main()
