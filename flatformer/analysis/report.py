"""The whole analysis of one checkpoint as one JSON-ready dict: what `flatformer analyze` prints
and what `flatformer reproduce` can save."""

from __future__ import annotations

import numpy as np

from ..tasks.windows import TaskData, evenly_spaced
from ..edges.budget import cut_windows
from ..edges.methods import build_problem, find_circuits
from ..training.evaluate import evaluate
from ..engine.model import Params
from ..readout import KL_DIRECTION, by_length, knob_kls, reference_windows, standard_knobs
from .algorithm import run_checks
from .circuits import TOP_K, circuit_table
from .grokking import progress
from .induction import induction_report
from .lens import contributions, lens_note, lens_summary

MAX_PROMPTS = 200
# Every knob reruns the model on every prompt: the default prompts' tokens x the parameters
# stay within PROMPT_WORK (200 prompts of 64 tokens on 100,000 parameters; every preset is
# far inside it), at least MIN_PROMPTS of them.
PROMPT_WORK = MAX_PROMPTS * 64 * 100_000
MIN_PROMPTS = 8


def prompt_limit(n_ctx: int, n_params: int) -> int:
    """How many default prompts of up to n_ctx tokens the analysis of a model of `n_params`
    parameters reads."""
    fit = PROMPT_WORK // max(n_ctx * n_params, 1)
    return int(max(MIN_PROMPTS, min(MAX_PROMPTS, fit)))


def prompt_length(n_ctx: int, n_params: int) -> int | None:
    """The tokens of each default prompt when even MIN_PROMPTS whole windows would pass
    PROMPT_WORK (a long context on millions of parameters): held-out windows are cut to their
    first this many (at least 8); None: whole windows."""
    if MIN_PROMPTS * n_ctx * n_params <= PROMPT_WORK:
        return None
    return int(min(n_ctx, max(8, PROMPT_WORK // (MIN_PROMPTS * n_params))))


def default_prompts(
    task, data: TaskData, limit: int | None = None, n_params: int = 0
) -> list[np.ndarray]:
    """The task's demo, then held-out windows cut just after a position the rule constrains (so
    the next token is the rule's), or plain held-out windows when the task has no rule: `limit`
    in all (default: `prompt_limit` of the context and `n_params`), the windows evenly spaced
    over the held-out set (`data.evenly_spaced`)."""
    if limit is None:
        limit = prompt_limit(data.val_inputs.shape[1], n_params)
    prompts = []
    if task.demo:
        demo = np.asarray(task.encode(task.demo))
        if 0 < len(demo) <= data.val_inputs.shape[1]:
            prompts.append(demo)
    if len(data.rule_index):
        windows = [w[: i + 1] for w, i in zip(data.rule_inputs, data.rule_index)]
    else:
        windows = list(data.val_inputs)
    keep = evenly_spaced(len(windows), max(limit - len(prompts), 0))
    return (prompts + [windows[i] for i in keep])[:limit]


def _summary(values: np.ndarray) -> dict:
    return {
        "min": float(values.min()),
        "median": float(np.median(values)),
        "mean": float(values.mean()),
        "max": float(values.max()),
        "worst_prompt": int(values.argmax()),
    }


def attribution(model, prompts) -> tuple[list[dict], float]:
    """Direct logit attribution at each prompt's last position: per term of the logit
    decomposition, its mean push on the model's top token relative to the average token (logits
    are only defined up to a constant, so each term is centred over the vocabulary). Also returns
    the largest gap between the sum of the terms and the model's logits (rounding only)."""
    totals: dict[str, float] = {}
    error = 0.0
    for _, batch in by_length(prompts):
        terms = contributions(model, batch)
        total = sum(terms.values())
        error = max(error, float(np.abs(total - model(batch)).max()))
        top = total[:, -1].argmax(-1)
        for name, logits in terms.items():
            last = logits[:, -1] - logits[:, -1].mean(-1, keepdims=True)
            totals[name] = totals.get(name, 0.0) + float(last[np.arange(len(batch)), top].sum())
    return [{"term": name, "push": t / len(prompts)} for name, t in totals.items()], error


def edge_circuit(model, task, data: TaskData, examples=None) -> dict:
    """{"edge_circuit": the circuit of `flatformer circuits` with its defaults (mean ablation,
    every method)}, on the prompts a search of about a minute affords (edges.budget: fewer,
    then shorter held-out windows, said by "edge_circuit_scope" when narrowed); past several
    minutes even then, None and the scope of the search that would be needed."""
    from ..edges.budget import BUDGET_SECONDS, choose_scope, cut_windows

    if examples is not None:
        found = find_circuits(build_problem(model, task, data, "mean", examples=examples))
        return {"edge_circuit": found}
    scope = choose_scope(model, data.val_inputs.shape[1], MAX_PROMPTS)
    info = {
        "prompts": scope.prompts,
        "length": scope.length,
        "estimated_seconds": scope.seconds,
        "searched": scope.seconds <= 3 * BUDGET_SECONDS,
    }
    if not info["searched"]:
        return {"edge_circuit": None, "edge_circuit_scope": info}
    problem = build_problem(
        model, task, cut_windows(data, scope.length), "mean", n_prompts=scope.prompts
    )
    found = {"edge_circuit": find_circuits(problem)}
    return {**found, "edge_circuit_scope": info} if scope.narrowed else found


def analyze(
    run,
    step: int | None = None,
    prompts: list[np.ndarray] | None = None,
    prompt_source: str | None = None,
    k: int = TOP_K,
    examples=None,
) -> dict:
    """Everything `flatformer analyze` reports about one checkpoint of a run; `examples`
    (`prompts.read_examples`) define the edge circuit's metric instead of the task."""
    step = run.resolve_step(step)
    model, task = run.model(step), run.task
    data = run.data()
    loss, rule_error = evaluate(Params.stack(run.cfg, [model.tensors]), data)
    measured = data  # the windows the knobs' means and the default prompts come from
    if prompts is None:
        length = prompt_length(run.cfg.n_ctx, run.cfg.n_params)
        measured = cut_windows(data, length)
        prompts = default_prompts(task, measured, n_params=run.cfg.n_params)
        prompt_source = "held-out" + (f" (their first {length} tokens)" if length else "")
    kls = knob_kls(model, prompts, standard_knobs(model, reference_windows(measured)))
    pushes, exact = attribution(model, prompts)
    report = {
        "run": str(run.path),
        "task": task.name,
        "step": step,
        "preset": run.config.get("preset"),
        "n_params": run.cfg.n_params,
        "model": run.cfg.to_dict(),
        "held_out": {
            "loss": float(loss[0]),
            "rule_error": float(rule_error[0]),
            "rule_positions": int(len(data.rule_targets)),
            "rule_positions_all": int(max(data.rule_total, len(data.rule_targets))),
        },
        "prompts": {
            "count": len(prompts),
            "source": prompt_source or "given",
            "text": [task.decode(p) for p in prompts],
        },
        "algorithm": run_checks(model, task, data),
        "kl": KL_DIRECTION,
        "knobs": [
            {"name": name, **_summary(values), "kl": values.tolist()}
            for name, values in kls.items()
        ],
        "lens": {
            "note": lens_note(model),
            "stages": lens_summary(model, prompts),
            "decomposition_error": exact,
            "attribution": pushes,
        },
        "circuits": circuit_table(model, k),
        **edge_circuit(model, task, data, examples),
        "induction": induction_report(run, step) if task.name == "induction" else None,
    }
    if task.name == "modular-addition":
        report["grokking"] = progress(run, [s for s in run.steps if s <= step])
    return report
