"""The geometry report: every activation's RDM on one stimulus set, and how they relate
(activation x activation, over training, across seeds)."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .crossnobis import model_crossnobis
from .data import compare_with_data, load_recordings
from .measures import (
    correlation_rdm,
    euclidean_rdm,
    kendall_tau_a,
    linear_cka,
    procrustes_distance,
    rbf_cka,
    spearman,
    spearman_matrix,
    whitened_cosine_matrix,
)
from .stimuli import representations, stimuli

RDMS = {"correlation": correlation_rdm, "euclidean": euclidean_rdm}


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


def check_geometry_memory(cfg, shape: tuple, checkpoints: int = 1, memory: int | None = None):
    """Refuse, before the forward pass, a geometry of stimuli `shape` (count, width) whose
    representations, RDMs and comparisons need more than the machine's available memory
    (`memory` overrides it), naming the --stimuli that would fit."""
    from ..store.resources import available_memory, check_memory, geometry_fit, geometry_memory

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
    if fit and checkpoints > 1 and geometry_memory(cfg, n, width) <= memory:
        hint = "leave out --training, or " + hint
    check_memory(needed, f"geometry on {n:,} stimuli of {width} tokens", hint, memory)


def activation_matrix(reps: dict, measure=linear_cka) -> tuple[list[str], np.ndarray]:
    names = list(reps)
    m = np.eye(len(names))
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            m[a, b] = m[b, a] = measure(reps[names[a]], reps[names[b]])
    return names, m


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
) -> dict:
    """JSON-ready: stimuli, per activation its RDMs, the activation x activation linear CKA,
    RBF CKA, Procrustes, and RDM Spearman, Kendall tau-a and whitened cosine matrices; with
    `over_training`, each activation's similarity (`measures`) with its own final geometry at
    every checkpoint; with `data` (a recordings file),
    every activation's RDM against the data's (`compare_with_data`, options `data_options`);
    with `against` (another run), `against_report`; with `crossnobis` (a noise method), the
    model's crossnobis RDMs over repeated held-out windows (`model_crossnobis`)."""
    step = run.resolve_step(step)
    tokens, read, labels = stimuli(run, prompts)
    check_geometry_memory(run.cfg, tokens.shape, len(run.steps) if over_training else 1)
    recordings = load_recordings(data, len(labels)) if data is not None else None
    reps = _informative(representations(run.model(step), tokens, read))
    rdms = {name: {kind: f(x) for kind, f in RDMS.items()} for name, x in reps.items()}
    names, cka = activation_matrix(reps)
    report = {
        "run": str(run.path),
        "step": step,
        "stimuli": labels,
        "activations": names,
        "rdms": {n: {k: v.tolist() for k, v in d.items()} for n, d in rdms.items()},
        "linear_cka": cka.tolist(),
        "rbf_cka": activation_matrix(reps, rbf_cka)[1].tolist(),
        "procrustes": activation_matrix(reps, procrustes_distance)[1].tolist(),
    }
    # The RDM comparisons on the correlation-distance RDMs (Nili et al. 2014; Diedrichsen et al.
    # 2021); the whitened cosine needs rsatoolbox, and is left out, with the reason, without it.
    vectors = {n: rdms[n]["correlation"] for n in names}
    report["rdm_spearman"] = spearman_matrix(list(vectors.values())).tolist()
    report["rdm_kendall_tau_a"] = activation_matrix(vectors, kendall_tau_a)[1].tolist()
    try:
        report["rdm_whitened_cosine"] = whitened_cosine_matrix(list(vectors.values())).tolist()
    except FlatformerError as exc:
        report["rdm_whitened_cosine"], report["rdm_whitened_cosine_reason"] = None, str(exc)
    if against is not None:
        report["against"] = against_report(against, tokens, read, reps, run.vocab, measures)
    if recordings is not None:
        report["data"] = compare_with_data(reps, recordings, **(data_options or {}))
    if over_training:
        report["training"] = training_curve(run, tokens, read, reps, measures)
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
        m: cross([reps[a] for a in rows], [theirs[b] for b in cols], m)
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
MEASURES = {
    "cka": linear_cka,
    "cka-rbf": rbf_cka,
    "procrustes": procrustes_distance,
    "spearman": spearman,
    "tau-a": kendall_tau_a,
    "cosine": None,  # whitened cosine: one rsatoolbox covariance for all RDMs at once
}
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


def _prepared(xs: list, measure: str) -> list:
    return [correlation_rdm(x) for x in xs] if measure in ON_RDMS else xs


def pairwise(xs: list, measure: str) -> np.ndarray:
    """items x items `measure` (1 on the diagonal for similarities, 0 for Procrustes)."""
    xs = _prepared(xs, measure)
    if measure == "cosine":
        return whitened_cosine_matrix(xs)
    if measure == "spearman":
        return spearman_matrix(xs)
    f = MEASURES[measure]
    m = np.full((len(xs), len(xs)), 0.0 if measure == "procrustes" else 1.0)
    for a in range(len(xs)):
        for b in range(a + 1, len(xs)):
            m[a, b] = m[b, a] = f(xs[a], xs[b])
    return m


def cross(xs: list, ys: list, measure: str) -> np.ndarray:
    """len(xs) x len(ys) `measure` between every x and every y."""
    xs, ys = _prepared(xs, measure), _prepared(ys, measure)
    if measure == "cosine":
        return whitened_cosine_matrix([*xs, *ys])[: len(xs), len(xs) :]
    return np.array([[MEASURES[measure](x, y) for y in ys] for x in xs])


def to_reference(xs: list, reference, measure: str) -> list[float]:
    """`measure` between each of `xs` and `reference`."""
    xs, (ref,) = _prepared(xs, measure), _prepared([reference], measure)
    if measure == "cosine":
        return whitened_cosine_matrix([ref, *xs])[0, 1:].tolist()
    return [float(MEASURES[measure](x, ref)) for x in xs]


def _settled(steps, values, measure) -> int | None:
    """The first step from which the curve stays settled (SETTLE), None if the last is not."""
    values = np.asarray(values)
    ok = values <= SETTLE[measure] if measure == "procrustes" else values >= SETTLE[measure]
    k = len(ok)
    while k > 0 and ok[k - 1]:
        k -= 1
    return steps[k] if k < len(steps) else None


def training_curve(run, tokens, read, final: dict, measures=("cka",)) -> dict:
    """{"steps", "to_final": {measure: {name: [similarity to the final geometry at each
    step]}}, "settled_at": {measure: {name: the first step from which it stays settled}},
    "settle_threshold"}; "cka_to_final" is the linear CKA curve when CKA is among them."""
    steps = run.steps
    per_step = {n: [] for n in final}
    for s in steps:
        reps = representations(run.model(s), tokens, read)
        for n in final:
            per_step[n].append(reps[n])
    curves = {m: {n: to_reference(per_step[n], x, m) for n, x in final.items()} for m in measures}
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


def seeds_report(runs, step=None, measures=("cka",)) -> dict:
    """Per activation and measure, the seeds x seeds matrix and its mean over every pair of
    seeds and over the pairs of successful ones (final rule error < 0.05)."""
    tokens, read, _ = stimuli(runs[0])
    per_seed = [representations(r.model(step), tokens, read) for r in runs]
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
            m = pairwise(xs, measure)
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
