"""The geometry report: every activation's RDM on one stimulus set, and how they relate
(activation x activation, over training, across seeds)."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .crossnobis import model_crossnobis
from .data import compare_with_data, load_recordings
from ..store.resources import (
    available_memory,
    check_memory,
    geometry_activations,
    geometry_fit,
    geometry_memory,
)
from .budget import BUDGET_SECONDS, affordable_stimuli, geometry_seconds
from .measures import correlation_rdm, euclidean_rdm, similarity_matrix
from .stimuli import representations, stimuli

RDMS = {"correlation": correlation_rdm, "euclidean": euclidean_rdm}
LONG_SECONDS = 30  # a geometry expected to take longer says so before it starts


def _informative(reps: dict) -> dict:
    """Drop activations with no variance over the stimuli (nothing to compare); none left is
    refused, not reported as empty matrices and NaN."""
    kept = {k: v for k, v in reps.items() if np.ptp(v, axis=0).max() > 1e-12}
    if not kept:
        raise FlatformerError(
            "no activation varies over these stimuli (they read alike): nothing to compare; "
            "give --stimuli prompts that differ where they are read"
        )
    return kept


def check_geometry_memory(
    cfg, shape: tuple, checkpoints: int = 1, memory: int | None = None, seeds: bool = False
):
    """Refuse, before the forward pass, a geometry of stimuli `shape` (count, width) whose
    representations (one set per checkpoint, or per run with `seeds`), RDMs and comparisons
    need more than the machine's available memory (`memory` overrides it), naming the
    --stimuli, or the seeds, that would fit."""
    n, width = shape
    memory = available_memory() if memory is None else memory
    needed = geometry_memory(cfg, n, width, checkpoints)
    if memory is None or needed <= memory:
        return
    fit = geometry_fit(cfg, width, memory, checkpoints)
    hint = (
        f"give --stimuli FILE of at most {fit:,} prompts"
        if fit
        else "not even 3 stimuli fit: free some memory"
    )
    if seeds:
        most = 1
        while most < checkpoints and geometry_memory(cfg, n, width, most + 1) <= memory:
            most += 1
        hint = (
            f"give a folder of at most {most} seeds"
            if most > 1
            else "not even 2 seeds fit: free some memory"
        )
    elif fit and checkpoints > 1 and geometry_memory(cfg, n, width) <= memory:
        hint = "leave out --training, or " + hint
    what = f"geometry of {checkpoints} seeds" if seeds else "geometry"
    check_memory(needed, f"{what} on {n:,} stimuli of {width} tokens", hint, memory)


def _quiet(stage: str, i: int, n: int, message: str):
    pass


def planned_stimuli(run, prompts=None, passes: int = 1, progress=_quiet):
    """`stimuli`, the default held-out windows narrowed to what a geometry of `passes` runs
    through the model affords (rsa.budget), saying so."""
    tokens, read, labels = stimuli(run, prompts)
    (n, width), cfg = tokens.shape, run.cfg
    if prompts is None and cfg.d_model != 2:
        fit = affordable_stimuli(cfg, n, width, passes)
        if fit < n:
            tokens, read, labels = tokens[:fit], read[:fit], labels[:fit]
            progress(
                "note",
                0,
                0,
                f"geometry: the first {fit} of {n} held-out windows, to keep within about "
                f"{BUDGET_SECONDS / 60:.0f} minutes (--stimuli FILE gives others)",
            )
    return tokens, read, labels


def announce(cfg, shape: tuple, passes: int, progress):
    """Say the estimate of a geometry on stimuli `shape` expected to be long, before it
    starts."""
    (n, width), seconds = shape, geometry_seconds(cfg, *shape, passes)
    if seconds <= LONG_SECONDS:
        return
    when = (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.0f} minutes"
        if seconds < 5400
        else f"{seconds / 3600:.0f} hours"
    )
    progress(
        "note",
        0,
        0,
        f"geometry: {geometry_activations(cfg):,} activations on {n:,} stimuli of {width:,} "
        f"tokens, about {when}",
    )


# The comparisons of every activation with every other, as the report names them.
ACTIVATION_MATRICES = {
    "linear_cka": "cka",
    "rbf_cka": "cka-rbf",
    "procrustes": "procrustes",
    "rdm_spearman": "spearman",
    "rdm_kendall_tau_a": "tau-a",
    "rdm_whitened_cosine": "cosine",
}


def geometry_report(
    run,
    step=None,
    prompts=None,
    over_training=False,
    data=None,
    data_options=None,
    against=None,
    measures=("cka",),
    crossnobis=None,
    progress=_quiet,
) -> dict:
    """JSON-ready: stimuli, per activation its RDMs, the activation x activation linear CKA,
    RBF CKA, Procrustes, and RDM Spearman, Kendall tau-a and whitened cosine matrices; with
    `over_training`, each activation's similarity (`measures`) with its own final geometry at
    every checkpoint; with `data` (a recordings file),
    every activation's RDM against the data's (`compare_with_data`, options `data_options`);
    with `against` (another run), `against_report`; with `crossnobis` (a noise method), the
    model's crossnobis RDMs over repeated held-out windows (`model_crossnobis`). `progress`
    (stage, i, n, message) is told of the passes, the comparisons and the checkpoints."""
    step = run.resolve_step(step)
    checkpoints = len(run.steps) if over_training else 1
    passes = checkpoints + (against is not None)
    tokens, read, labels = planned_stimuli(run, prompts, passes, progress)
    check_geometry_memory(run.cfg, tokens.shape, checkpoints)
    announce(run.cfg, tokens.shape, passes, progress)
    recordings = load_recordings(data, len(labels)) if data is not None else None

    def passed(i: int, n: int):
        progress("forward", i, n, "")

    reps = _informative(representations(run.model(step), tokens, read, passed))
    rdms = {name: {kind: f(x) for kind, f in RDMS.items()} for name, x in reps.items()}
    names = list(reps)
    report = {
        "run": str(run.path),
        "step": step,
        "stimuli": labels,
        "activations": names,
        "rdms": {n: {k: v.tolist() for k, v in d.items()} for n, d in rdms.items()},
    }
    # On the representations, and on their correlation-distance RDMs (Nili et al. 2014;
    # Diedrichsen et al. 2021); the whitened cosine needs rsatoolbox, and is left out, with the
    # reason, without it.
    vectors = [rdms[n]["correlation"] for n in names]
    for k, (key, measure) in enumerate(ACTIVATION_MATRICES.items()):
        progress("comparisons", k, len(ACTIVATION_MATRICES), measure)
        try:
            xs = vectors if measure in ON_RDMS else list(reps.values())
            report[key] = similarity_matrix(xs, measure=measure).tolist()
        except FlatformerError as exc:
            report[key], report[f"{key}_reason"] = None, str(exc)
    progress("comparisons", len(ACTIVATION_MATRICES), len(ACTIVATION_MATRICES), "")
    if against is not None:
        report["against"] = against_report(against, tokens, read, reps, run.vocab, measures)
    if recordings is not None:
        report["data"] = compare_with_data(reps, recordings, **(data_options or {}))
    if over_training:
        report["training"] = training_curve(run, tokens, read, reps, measures, progress)
    if crossnobis is not None:
        report["crossnobis"] = model_crossnobis(run, step, crossnobis)
    return report


def against_report(other, tokens, read, reps: dict, vocab: list[str], measures=("cka",)) -> dict:
    """Linear CKA (and each of `measures`) between every activation of this run (rows) and
    every activation of `other` (columns), on this run's stimuli (the runs must share
    vocabulary and context), and each activation's value with the same-named one of `other`."""
    if list(other.vocab) != list(vocab) or other.cfg.n_ctx < tokens.shape[1]:
        raise FlatformerError(
            f"--against {other.path}: a different vocabulary or a shorter "
            f"context, so the stimuli cannot be shared"
        )
    theirs = _informative(representations(other.model(None), tokens, read))
    rows, cols = list(reps), list(theirs)
    tables = {
        m: compare([reps[a] for a in rows], [theirs[b] for b in cols], m)
        for m in dict.fromkeys(("cka", *measures))
    }

    def same(m):
        return {a: float(m[k, cols.index(a)]) for k, a in enumerate(rows) if a in cols}

    return {
        "run": str(other.path),
        "step": other.resolve_step(None),
        "rows": rows,
        "columns": cols,
        "linear_cka": tables["cka"].tolist(),
        "same_name": same(tables["cka"]),
        "measures": {m: {"matrix": t.tolist(), "same_name": same(t)} for m, t in tables.items()},
    }


# The comparisons `--measure` offers for seeds and checkpoints: on the representations (CKA,
# Procrustes) or on their correlation-distance RDMs (Spearman, tau-a, whitened cosine).
MEASURES = ("cka", "cka-rbf", "procrustes", "spearman", "tau-a", "cosine")
ON_RDMS = ("spearman", "tau-a", "cosine")
# "Settled": similarity >= 0.9, or for Procrustes (an angle) at most arccos(0.9), the angle
# whose cosine (the normalised nuclear norm) is 0.9.
SETTLE = {m: 0.9 for m in MEASURES} | {"procrustes": float(np.arccos(0.9))}


def parse_measures(text: str) -> list[str]:
    """`--measure`: one name of MEASURES, several joined by commas, or "all"."""
    names = list(MEASURES) if text == "all" else [m.strip() for m in text.split(",")]
    bad = [m for m in names if m not in MEASURES]
    if bad or not names:
        raise FlatformerError(
            f"--measure must be one of {', '.join(MEASURES)} (comma-separated) or all, got {text!r}"
        )
    return list(dict.fromkeys(names))


def compare(xs: list, ys: list | None = None, measure: str = "cka") -> np.ndarray:
    """len(xs) x len(ys) `measure` between representations, every x with every y (ys defaults
    to xs: 1 on the diagonal for similarities, 0 for Procrustes)."""
    if measure in ON_RDMS:
        xs = [correlation_rdm(x) for x in xs]
        ys = None if ys is None else [correlation_rdm(y) for y in ys]
    return similarity_matrix(xs, ys, measure)


def _settled(steps, values, measure) -> int | None:
    """The first step from which the curve stays settled (SETTLE), None if the last is not."""
    values = np.asarray(values)
    ok = values <= SETTLE[measure] if measure == "procrustes" else values >= SETTLE[measure]
    k = len(ok)
    while k > 0 and ok[k - 1]:
        k -= 1
    return steps[k] if k < len(steps) else None


def training_curve(run, tokens, read, final: dict, measures=("cka",), progress=_quiet) -> dict:
    """{"steps", "to_final": {measure: {name: [similarity to the final geometry at each
    step]}}, "settled_at": {measure: {name: the first step from which it stays settled}},
    "settle_threshold"}; "cka_to_final" is the linear CKA curve when CKA is among them."""
    steps = run.steps
    per_step = {n: [] for n in final}
    for k, s in enumerate(steps):
        progress("checkpoints", k, len(steps), f"step {s}")
        reps = representations(run.model(s), tokens, read)
        for n in final:
            per_step[n].append(reps[n])
    curves = {
        m: {n: compare(per_step[n], [x], m)[:, 0].tolist() for n, x in final.items()}
        for m in measures
    }
    out = {
        "steps": steps,
        "measures": list(measures),
        "to_final": curves,
        "settled_at": {
            m: {n: _settled(steps, v, m) for n, v in c.items()} for m, c in curves.items()
        },
        "settle_threshold": {m: SETTLE[m] for m in measures},
    }
    if "cka" in curves:
        out["cka_to_final"] = curves["cka"]
    return out


def seeds_report(runs, step=None, measures=("cka",), progress=_quiet) -> dict:
    """Per activation and measure, the seeds x seeds matrix and its mean over every pair of
    seeds and over the pairs of successful ones (final rule error < 0.05)."""
    tokens, read, _ = planned_stimuli(runs[0], None, len(runs), progress)
    check_geometry_memory(runs[0].cfg, tokens.shape, len(runs), seeds=True)
    announce(runs[0].cfg, tokens.shape, len(runs), progress)
    per_seed = []
    for k, r in enumerate(runs):
        progress("seeds", k, len(runs), r.path.name)
        per_seed.append(representations(r.model(step), tokens, read))
    progress("seeds", len(runs), len(runs), "")
    errors = [r.metrics[-1].get("rule_error") if r.metrics else None for r in runs]
    good = [k for k, e in enumerate(errors) if e is not None and e < 0.05]
    out = {
        "seeds": [r.path.name for r in runs],
        "rule_error": errors,
        "successful": good,
        "measures": list(measures),
        "activations": [],
        "by_activation": {},
    }
    iu = np.triu_indices(len(runs), 1)
    ig = np.triu_indices(len(good), 1)
    for name in per_seed[0]:
        xs = [p[name] for p in per_seed]
        if max(np.ptp(x, axis=0).max() for x in xs) <= 1e-12:
            continue
        entry = {}
        for measure in measures:
            m = compare(xs, measure=measure)
            entry[measure] = {
                "mean": float(m[iu].mean()) if len(xs) > 1 else float(m[0, 0]),
                "mean_successful": (
                    float(m[np.ix_(good, good)][ig].mean()) if len(good) > 1 else None
                ),
                "matrix": m.tolist(),
            }
        out["activations"].append(name)
        out["by_activation"][name] = entry
    return out
