"""Circuit methods against circuits known by construction: every reference program of the RASP
library compiled, and exact ablation, EAP, EAP-IG and ACDC scored against its known circuit.

    python bench/circuits_compiled.py

The known circuit is read off the compiled weights (an edge where the sender writes a
direction the receiver reads) and kept where it is live: its zero ablation changes the output
on some input (`rasp/circuit.py`). Each program is compiled with max_len 5 and read, as Conmy
et al. 2023 read tracr's reverse and frac_prevs (ACDC, Table 3), on inputs one shorter than
max_len (every one of them, up to 64), at every position after BOS, with zero ablation; the
metric is their L2 (the logits' squared distance from the clean ones) and, beside it, the log
probability of the clean model's output. Per method: ROC AUC of its edge scores for membership
in the known circuit, and the precision and recall of the circuit it selects (exact ablation:
its greedy circuit; ACDC: its kept edges; EAP, EAP-IG: as many top edges as the greedy circuit).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
from common import record

from flatformer.edges.methods import build_problem, find_circuits
from flatformer.edges.report import known_circuit_scores
from flatformer.model.transformer import Transformer
from flatformer.rasp.circuit import known_edges, live_edges
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.run import domain

from rasp_library import PROGRAMS

MAX_LEN, MAX_PROMPTS = 5, 64
SETTINGS = (("l2", "L2 (ACDC's)"), ("logprob", "log p"))
METHODS = ("exact", "eap", "eap_ig", "acdc")


def prompts(compiled, n: int) -> np.ndarray:
    """Every input of length n (the first MAX_PROMPTS in order, when there are more)."""
    rows = itertools.islice(itertools.product(compiled.vocab, repeat=n), MAX_PROMPTS)
    return np.array([compiled.encode(list(xs)) for xs in rows])


def main() -> int:
    with record(
        __file__, "Circuit methods against compiled programs' known circuits", markdown=True
    ):
        print(__doc__.split("\n\n", 2)[2].strip() + "\n")
        head = " | ".join(f"{m} AUC / P / R" for m in ("exact", "EAP", "EAP-IG", "ACDC"))
        print(f"| program | metric | prompts | edges | known (wired) | {head} |")
        print("|---|---|---|---|---|" + "---|" * 4)
        for name, program, vocab, _ in PROGRAMS:
            compiled = compile_rasp_to_model(program, vocab, MAX_LEN)
            model = Transformer(compiled.cfg, compiled.tensors)
            wired = known_edges(model)
            known = live_edges(model, wired, domain(compiled)[0])
            tokens = prompts(compiled, MAX_LEN - 1)
            index = np.full(len(tokens), tokens.shape[1] - 1)
            examples = (tokens, index, np.zeros(len(tokens), int), None, None)
            for metric, label in SETTINGS:
                problem = build_problem(
                    model, None, None, "zero", metric, examples=examples, positions="all"
                )
                report = find_circuits(problem)
                scores = known_circuit_scores(report, known)["methods"]
                cells = " | ".join(
                    " / ".join(
                        "-" if scores[m][k] is None else f"{scores[m][k]:.2f}"
                        for k in ("auc", "precision", "recall")
                    )
                    for m in METHODS
                )
                print(
                    f"| {name} | {label} | {len(tokens)} | {problem.graph.n_edges} | "
                    f"{len(known)} ({len(wired)}) | {cells} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
