"""A dictionary's scores as SAELens computes them (`sae_lens/evals.py`,
`get_sparsity_and_variance_metrics` and `get_recons_loss`; `sae_lens/synthetic/evals.py`'s
calculators), on arrays: tokens x features, already flattened.

- l0: mean over tokens of the number of latents with f != 0; l1: mean of sum |f|.
- explained_variance: 1 - E||x - x_hat||^2 / (E||x||^2 - ||E x||^2) (SAELens's
  `ExplainedVarianceCalculator`); fvu = 1 - explained_variance, the fraction of variance
  unexplained, sum ||x - x_hat||^2 / sum ||x - mean x||^2. `explained_variance_legacy` is
  SAELens's older per-token mean of 1 - ||x - x_hat||^2 / ||x - mean x||^2, kept for
  comparison with published tables.
- mse: mean over tokens of ||x - x_hat||^2; cossim: mean cosine of x and x_hat (tokens where
  either is the zero vector left out; SAELens's mean would be NaN there).
- l2_ratio (shrinkage): mean of ||x_hat|| / ||x||, a norm under 1e-4 divided by 1 as
  SAELens's evals do; relative_reconstruction_bias: E||x_hat||^2 / E[x . x_hat] (Rajamanoharan
  et al. 2024, "Improving Dictionary Learning with Gated SAEs", eq. 10).
- dead: latents never active over the evaluation tokens (SAELens's `DeadLatentsCalculator`);
  dense: latents active on more than `dense_above` of them (a threshold we state: 0.1).
- CE loss score and KL score (`spliced_scores`): the dictionary's reconstruction spliced into
  the forward pass in place of the activation, against the activation ablated:
  (CE_ablated - CE_spliced) / (CE_ablated - CE_clean) and (KL_ablated - KL_spliced) /
  KL_ablated, KL(clean || other) summed over the vocabulary. SAELens ablates with zeros; mean
  ablation (the activation's mean over the evaluation tokens and positions) is offered too.
"""

from __future__ import annotations

import numpy as np

DENSE_ABOVE = 0.1


def reconstruction_metrics(
    x: np.ndarray, x_hat: np.ndarray, f: np.ndarray, dense_above: float = DENSE_ABOVE
) -> dict:
    """Sparsity, reconstruction and shrinkage of one dictionary on x (N, d) -> x_hat (N, d) with
    latents f (N, m); for a transcoder x is the target (the MLP's output)."""
    x, x_hat, f = (np.asarray(a, dtype=np.float64) for a in (x, x_hat, f))
    resid = ((x - x_hat) ** 2).sum(-1)
    mean_sq = float((x**2).sum(-1).mean())
    total_var = mean_sq - float((x.mean(0) ** 2).sum())
    mse = float(resid.mean())
    if total_var < 1e-10:
        ev = 1.0 if mse < 1e-10 else 0.0
    else:
        ev = 1.0 - mse / total_var
    per_token_var = ((x - x.mean(0)) ** 2).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        legacy = float(np.mean(1 - resid / per_token_var))
    norm_in, norm_out = np.linalg.norm(x, axis=-1), np.linalg.norm(x_hat, axis=-1)
    ratio = norm_out / np.where(np.abs(norm_in) < 1e-4, 1.0, norm_in)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = (x * x_hat).sum(-1) / (norm_in * norm_out)
    active = f != 0
    density = active.mean(0)
    return {
        "l0": float(active.sum(-1).mean()),
        "l1": float(np.abs(f).sum(-1).mean()),
        "explained_variance": ev,
        "fvu": 1.0 - ev,
        "explained_variance_legacy": legacy,
        "mse": mse,
        "cossim": float(np.nanmean(cos)) if np.isfinite(cos).any() else float("nan"),
        "l2_norm_in": float(norm_in.mean()),
        "l2_norm_out": float(norm_out.mean()),
        "l2_ratio": float(ratio.mean()),
        "relative_reconstruction_bias": float((norm_out**2).mean() / (x * x_hat).sum(-1).mean()),
        "dead": int((density == 0).sum()),
        "dense": int((density > dense_above).sum()),
        "d_sae": int(f.shape[-1]),
        "tokens": int(x.shape[0]),
    }


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 (an ablation that changes nothing leaves the score undefined)."""
    return a / b if b != 0 else float("nan")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def ce_per_token(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log p(target) at each position (B, T)."""
    lp = log_softmax(logits)
    return -np.take_along_axis(lp, targets[..., None], axis=-1)[..., 0]


def kl_per_token(clean: np.ndarray, other: np.ndarray) -> np.ndarray:
    """KL(clean || other) over the vocabulary at each position (SAELens's `_kl`)."""
    lp, lq = log_softmax(clean), log_softmax(other)
    return (np.exp(lp) * (lp - lq)).sum(-1)


def spliced_scores(
    model,
    tokens: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    hook_in: str,
    hook_out: str,
    reconstruct,
    ablation: str = "zero",
    mean: np.ndarray | None = None,
) -> dict:
    """CE and KL with the dictionary spliced in at `hook_out` (its input read at `hook_in` in
    the same pass: the same activation for an autoencoder, the MLP's input for a transcoder),
    with `hook_out` ablated (zero, or its `mean` over every position of `tokens`, read here when
    not given), and clean; averaged over the positions whose weight is positive.
    `reconstruct(a)` maps an input activation (..., d_in) to (..., d_out). The windows run a
    few at a time (the store's rows_per_pass): the logits of a long context, three times over,
    are the largest thing it makes."""
    from ..store.resources import rows_per_pass
    from .activations import read as read_activations

    if ablation == "mean" and mean is None:
        mean = read_activations(model, tokens, [hook_out])[hook_out].mean(0)
    step = rows_per_pass(model.cfg, np.shape(tokens)[-1])
    parts = [slice(i, i + step) for i in range(0, len(tokens), step)]
    seen = {}

    def read(a, name):
        seen["x"] = a
        return a

    def splice(a, name):
        return reconstruct(seen["x"] if hook_in != hook_out else a).reshape(a.shape)

    def ablate(a, name):
        return np.zeros_like(a) if ablation == "zero" else np.broadcast_to(mean, a.shape).copy()

    hooks = {hook_out: splice} if hook_in == hook_out else {hook_in: read, hook_out: splice}
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    sums = dict.fromkeys(("clean", "spliced", "ablated", "kl_spliced", "kl_ablated"), 0.0)
    for part in parts:
        t, wp = targets[part], w[part]
        clean = model(tokens[part])
        spliced = model(tokens[part], hooks=hooks)
        ablated = model(tokens[part], hooks={hook_out: ablate})
        for key, v in (("clean", clean), ("spliced", spliced), ("ablated", ablated)):
            sums[key] += float((ce_per_token(v, t) * wp).sum())
        sums["kl_spliced"] += float((kl_per_token(clean, spliced) * wp).sum())
        sums["kl_ablated"] += float((kl_per_token(clean, ablated) * wp).sum())
    ce = {k: sums[k] for k in ("clean", "spliced", "ablated")}
    kl_sp, kl_ab = sums["kl_spliced"], sums["kl_ablated"]
    return {
        "ce_loss_without_sae": ce["clean"],
        "ce_loss_with_sae": ce["spliced"],
        "ce_loss_with_ablation": ce["ablated"],
        "ce_loss_score": ratio(ce["ablated"] - ce["spliced"], ce["ablated"] - ce["clean"]),
        "kl_div_with_sae": kl_sp,
        "kl_div_with_ablation": kl_ab,
        "kl_div_score": ratio(kl_ab - kl_sp, kl_ab),
        "ablation": ablation,
    }
