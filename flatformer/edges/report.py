"""A run's circuits report (what `flatformer circuits` prints and writes as JSON), and every
method scored against a circuit known by construction where the run records one."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .methods import (
    _num,
    build_problem,
    check_memory,
    find_circuits,
    path_patch,
    prompts_for,
    roc_auc,
)


def known_circuit_scores(report: dict, known) -> dict:
    """Every method of a `find_circuits` report scored against a circuit known by construction
    (InterpBench's ground truth, a compiled program's): the ROC AUC of its edge scores (|effect|
    for exact ablation, |estimate| for EAP and EAP-IG, ACDC's own scores) for membership in the
    known circuit, and the precision and recall of the circuit it selects. Exact ablation selects
    its greedy circuit and ACDC its kept edges; EAP and EAP-IG have no threshold of their own,
    so they select as many top edges as the greedy circuit has (Conmy et al. 2023 score ACDC
    this way, by AUC over its threshold, and at one threshold)."""
    names = [(r["src"], r["dst"]) for r in report["edges"]]
    truth = {tuple(e) for e in known}
    missing = sorted(truth - set(names))
    if missing:
        raise FlatformerError(
            f"the known circuit's edge {missing[0][0]}->{missing[0][1]} is not in the model's graph"
        )
    labels = np.array([n in truth for n in names])
    k = report["circuit"]["edges_kept"]
    out = {"edges": len(truth), "methods": {}}
    for key in ("exact", "eap", "eap_ig", "acdc"):
        if key not in report["edges"][0]:
            continue
        scores = np.array([r[key] for r in report["edges"]])
        scores = scores if key == "acdc" else np.abs(scores)
        if key == "exact":
            chosen, by = set(map(tuple, report["circuit"]["edges"])), "its greedy circuit"
        elif key == "acdc":
            chosen, by = set(map(tuple, report["methods"]["acdc"]["edges"])), "its kept edges"
        else:
            chosen = {names[e] for e in np.argsort(-scores, kind="stable")[:k]}
            by = f"its top {k} edges (the greedy circuit's size)"
        hit = len(chosen & truth)
        out["methods"][key] = {
            "auc": _num(roc_auc(scores, labels)),
            "precision": _num(hit / len(chosen)) if chosen else None,
            "recall": _num(hit / len(truth)) if truth else None,
            "selected": len(chosen),
            "selected_by": by,
        }
    return out


def circuits_report(
    run,
    step,
    ablation,
    metric,
    methods,
    prompts,
    target,
    tau,
    ig_steps,
    progress=None,
    path=None,
    examples=None,
    positions="last",
    length=None,
) -> dict:
    """The JSON report of `flatformer circuits` for a loaded run; with `path` (edges), also
    that path's path-patching effect between the clean and the corrupt prompts; with `length`,
    on held-out windows cut to their first `length` tokens (budget.cut_windows)."""
    from .budget import cut_windows

    step = run.resolve_step(step)
    # Examples ablated by resampling or zeroing need no task data (an imported model has none)
    data = run.data() if examples is None or ablation == "mean" else None
    if data is not None and examples is None:
        data = cut_windows(data, length)
    tokens = examples[0] if examples is not None else prompts_for(run.task, data, prompts)[0]
    # Read at every position, the last layer runs once per position of each prompt.
    reads = len(tokens) * (tokens.shape[1] if positions == "all" else 1)
    check_memory(run.cfg, reads, tokens.shape[1], from_file=examples is not None)

    def problem_for(ablated):
        return build_problem(
            run.model(step),
            run.task,
            data,
            ablated,
            metric,
            prompts,
            examples=examples,
            positions=positions,
        )

    problem = problem_for(ablation)
    patched = None
    if path:
        if problem.corrupt is None:
            problem = problem_for("resample")
        patched = {"path": [list(e) for e in path], "effect": path_patch(problem, path)}
    report = find_circuits(problem, methods, target, tau=tau, ig_steps=ig_steps, progress=progress)
    known = (run.config.get("imported") or {}).get("circuit")
    if known:
        report["known_circuit"] = {
            "source": known["source"],
            **known_circuit_scores(report, known["edges"]),
        }
    return {
        "run": str(run.path),
        "task": run.task.name,
        "step": step,
        **report,
        **({"path_patching": patched} if patched else {}),
    }
