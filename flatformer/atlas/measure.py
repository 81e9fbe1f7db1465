"""Each run's measures, as the atlas tabulates them: Zhong et al. 2023's mechanism measures
under the names their published table (`result/1l_fixedwidth.csv`) gives them, and
flatformer's own grokking measures beside them (Nanda et al. 2023).

Published names (analysis/mechanism.py computes the first three): `gradient_sim` (gradient
symmetricity), `distance_irrelevance`, `circularity`, `training_accuracy`,
`validation_accuracy` (over the run's own training and held-out pairs) and `parameter_norm`
(the l2 norm of every parameter, as their `parameters_norm`). Ours: `mechanism` (clock, pizza
or other: mechanism.py's `kind`), `accuracy` (over all p^2 pairs), `key_frequencies`
(space-separated) and their number, `key_share` (the key frequencies' share of the
embedding's Fourier energy), `restricted_loss` (over all p^2 pairs) and `excluded_loss` (over
the training pairs).
A task other than modular addition gets the training metrics only: its measure columns are
left empty.
"""

from __future__ import annotations

import math

import numpy as np

PUBLISHED = (
    "gradient_sim",
    "distance_irrelevance",
    "circularity",
    "training_accuracy",
    "validation_accuracy",
    "parameter_norm",
)
OURS = (
    "mechanism",
    "accuracy",
    "key_frequencies",
    "n_key_frequencies",
    "key_share",
    "restricted_loss",
    "excluded_loss",
)
MEASURES = PUBLISHED + OURS
MECHANISMS = ("clock", "pizza", "other")


def run_measures(run, step: int | None = None) -> dict:
    """The measures of a run's checkpoint at `step` (a `runs.Run`; default its last),
    {column: value}; empty for a task the measures do not apply to."""
    from ..analysis.grokking import all_pairs, pair_logits, spectrum
    from ..analysis.mechanism import mechanism_measures
    from ..engine.model import Params

    task = run.task
    if task.name != "modular-addition":
        return {}
    p = task.p
    weights = run.weights(step)
    data_seed = run.config.get("data_seed", 0)
    mechanism = mechanism_measures(run.model(step), run.cfg, task, data_seed)
    logits = pair_logits(Params.stack(run.cfg, [weights]), p)[0]  # (p^2, V)
    pairs = all_pairs(p)
    right = logits[:, :p].argmax(-1) == (pairs[:, 0] + pairs[:, 1]) % p
    train, test = task.pairs(data_seed)
    keys = [int(k) for k in mechanism["key_frequencies"].split()]
    energy = spectrum(weights["embed.W_E"][:p]) ** 2
    return {
        "gradient_sim": float(mechanism["gradient_sim"]),
        "distance_irrelevance": float(mechanism["distance_irrelevance"]),
        "circularity": float(mechanism["circularity"]),
        "training_accuracy": float(right[train].mean()),
        "validation_accuracy": float(right[test].mean()),
        # math.fsum: exactly rounded, so the same weights give the same norm in any process
        # (NumPy's pairwise sums can differ with the arrays' alignment).
        "parameter_norm": math.sqrt(
            math.fsum(math.fsum(np.square(w, dtype=np.float64).ravel()) for w in weights.values())
        ),
        "mechanism": str(mechanism["kind"]),
        "accuracy": float(mechanism["accuracy"]),
        "key_frequencies": mechanism["key_frequencies"],
        "n_key_frequencies": int(mechanism["n_key_frequencies"]),
        "key_share": float(energy[keys].sum() / max(energy.sum(), 1e-300)),
        "restricted_loss": float(mechanism["restricted_loss"]),
        "excluded_loss": float(mechanism["excluded_loss"]),
    }
