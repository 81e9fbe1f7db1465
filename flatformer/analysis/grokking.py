"""Grokking's progress measures over a run's checkpoints (Nanda et al. 2023, "Progress measures
for grokking via mechanistic interpretability"), and the clock-or-pizza tests of Zhong et al.
2023 ("The Clock and the Pizza: Two Stories in Mechanistic Explanation of Neural Networks").

Everything is computed on all p^2 inputs `a b =` at once, from the logits at `=`: arrays in,
numbers out. The figures, movies and tables draw these numbers; nothing here draws.
"""

from __future__ import annotations

import numpy as np

from ..evaluate import logits_at
from ..engine.model import Params, backward, forward

KEY_SHARE = 0.9  # key frequencies: the fewest holding this share of W_L's energy
CLOCK_ABOVE = 0.4  # Zhong et al.: distance irrelevance 0-0.4 is pizza, 0.4-1 clock


def fourier_basis(p: int) -> tuple[np.ndarray, np.ndarray]:
    """The Fourier basis over Z_p (Nanda et al. 2023, section 3): orthonormal rows, the constant
    first, then cos(w x) and sin(w x) for w = 2 pi k / p, k = 1 .. p // 2 (for even p the last
    frequency has only its cosine, its sine being 0). Returns (basis (p, p), frequency k of each
    row (p,))."""
    x = np.arange(p)
    rows, freqs = [np.ones(p)], [0]
    for k in range(1, p // 2 + 1):
        for wave in (np.cos, np.sin):
            row = wave(2 * np.pi * k * x / p)
            if np.abs(row).max() > 1e-9:
                rows.append(row)
                freqs.append(k)
    basis = np.array(rows)
    return basis / np.linalg.norm(basis, axis=1, keepdims=True), np.array(freqs)


def spectrum(W: np.ndarray) -> np.ndarray:
    """The norm of each frequency k = 0 .. p // 2 of a matrix whose rows are indexed by Z_p
    (e.g. the embedding of the numbers, (p, d)): the root of the summed squares of its cos and
    sin coefficients (Nanda et al.'s embedding spectrum)."""
    p = W.shape[0]
    basis, freqs = fourier_basis(p)
    energy = ((basis @ W.reshape(p, -1)) ** 2).sum(1)
    return np.sqrt(np.bincount(freqs, weights=energy, minlength=p // 2 + 1))


def frequency_plane(W: np.ndarray, k: int) -> np.ndarray:
    """An orthonormal basis (d, 2) of the plane of R^d that frequency k of W (p, d) spans: its
    cos and sin coefficient vectors, orthonormalised. Projected on it, the numbers of a model
    that uses frequency k lie on a circle, number x at angle 2 pi k x / p (up to a rotation
    and a reflection)."""
    basis, freqs = fourier_basis(W.shape[0])
    q, _ = np.linalg.qr((basis[freqs == k] @ W).T)
    return q[:, :2]


def phases_of(W: np.ndarray, k: int) -> np.ndarray:
    """The angle (p,) in [0, 2 pi) of each row of W (p, d) in the plane of frequency k, around
    the rows' mean: the tokens' key-frequency phase."""
    xy = (W - W.mean(0)) @ frequency_plane(W, k)
    return np.mod(np.arctan2(xy[:, 1], xy[:, 0]), 2 * np.pi)


def sum_directions(p: int, freqs) -> np.ndarray:
    """Unit vectors over the p^2 pairs (a * p + b) of cos(w (a + b)) and sin(w (a + b)) for each
    frequency k in `freqs` (w = 2 pi k / p): orthonormal, (2 len(freqs), p^2) (zero vectors,
    the sine of k = p / 2, are left out)."""
    total = (np.arange(p)[:, None] + np.arange(p)[None, :]).ravel()
    rows = []
    for k in freqs:
        for wave in (np.cos, np.sin):
            row = wave(2 * np.pi * k * total / p)
            if np.abs(row).max() > 1e-9:
                rows.append(row / np.linalg.norm(row))
    return np.array(rows).reshape(-1, p * p)


def all_pairs(p: int) -> np.ndarray:
    """Every input `a b =`, (p^2, 3), pair a * p + b in row a * p + b."""
    a, b = np.divmod(np.arange(p * p), p)
    return np.stack([a, b, np.full_like(a, p)], 1)


def pair_logits(params: Params, p: int) -> np.ndarray:
    """The logits at `=` of every pair, for every seed (checkpoint) of `params`: (S, p^2, V)."""
    inputs = all_pairs(p)
    return logits_at(params, inputs, np.full(len(inputs), 2))


def losses(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Mean cross-entropy over the rows of (..., N, V) logits, (...)."""
    shifted = logits - logits.max(-1, keepdims=True)
    logz = np.log(np.exp(shifted).sum(-1))
    targets = np.broadcast_to(targets, logits.shape[:-1])
    picked = np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
    return (logz - picked).mean(-1)


def neuron_logit_map(weights, p: int) -> np.ndarray:
    """Nanda et al.'s neuron-logit map W_L = W_out W_U (section 4), of the last block's MLP and
    on the p number outputs: (d_mlp, p) for one model's `weights` (name -> array). A model
    without an MLP reads its logits through W_U alone: (d_model, p)."""
    readout = weights["unembed.W_U"][:, :p]
    outs = [name for name in weights if name.endswith(".mlp.W_out") and weights[name].size]
    if not outs:
        return readout
    return weights[max(outs, key=lambda name: int(name.split(".")[1]))] @ readout


def key_frequencies(weights, p: int, share: float = KEY_SHARE) -> list[int]:
    """The key frequencies of one model (`weights`: name -> array): the fewest frequencies
    k = 1 .. p // 2 that hold `share` of the Fourier energy of the neuron-logit map W_L over
    its output axis (the constant left out: softmax ignores it), largest first.

    Nanda et al. (section 4.1, Figure 3, right) read the key frequencies off the norms of W_L's
    Fourier components, taken over the logits and normed over the neurons: only the key
    frequencies are far from zero, and the neurons cluster by them. The embedding shows the
    same frequencies (Figure 3 left), but it is not consulted here, so that the share of the
    embedding the key frequencies explain is a test of the account and not its definition."""
    energy = spectrum(neuron_logit_map(weights, p).T)[1:] ** 2
    order = np.argsort(-energy, kind="stable")
    held = np.cumsum(energy[order]) / max(energy.sum(), 1e-300)
    return sorted(int(k) + 1 for k in order[: int(np.searchsorted(held, share)) + 1])


def restricted_logits(logits: np.ndarray, p: int, freqs) -> np.ndarray:
    """Nanda et al.'s restricted logits: of the logits (..., p^2, V) as functions of (a, b), only
    the constant and the cos(w (a + b)), sin(w (a + b)) components of the key frequencies."""
    dirs = sum_directions(p, freqs)
    mean = logits.mean(-2, keepdims=True)
    return mean + np.einsum("kn,km,...mv->...nv", dirs, dirs, logits - mean, optimize=True)


def excluded_logits(logits: np.ndarray, p: int, freqs) -> np.ndarray:
    """Nanda et al.'s excluded logits: the logits (..., p^2, V) with the cos(w (a + b)),
    sin(w (a + b)) components of the key frequencies removed."""
    dirs = sum_directions(p, freqs)
    return logits - np.einsum("kn,km,...mv->...nv", dirs, dirs, logits, optimize=True)


def falls_at(steps: np.ndarray, loss: np.ndarray, after: int, fraction: float) -> int | None:
    """The first step from the highest log-loss at or after `after` at which the log-loss has
    come down `fraction` of the way to its final value; None when it never comes down (by less
    than a factor of 2 from its peak)."""
    keep = steps >= after
    if not keep.any():
        return None
    s, log = steps[keep], np.log(np.maximum(loss[keep], 1e-300))
    top = int(log.argmax())
    drop = log[top] - log[-1]
    if drop < np.log(2):
        return None
    below = np.flatnonzero(log[top:] <= log[top] - fraction * drop)
    return int(s[top + below[0]])


def halved_at(steps: np.ndarray, loss: np.ndarray, after: int) -> int | None:
    """The first step after the loss's highest value at or after `after` at which it is below
    half that value; None when it never halves. Nanda et al.'s ordering of the losses (the
    restricted loss falls before the test loss) compared on the same footing for both: a
    fraction of each loss's own peak, not of the way to its final value, which for the
    restricted loss is ~1e-7 and would put a log-scale midpoint late in the clean-up."""
    keep = steps >= after
    s, value = steps[keep], loss[keep]
    if not len(s):
        return None
    top = int(value.argmax())
    below = np.flatnonzero(value[top:] < value[top] / 2)
    return int(s[top + below[0]]) if len(below) else None


def phases(steps, train_accuracy, test_loss, test_accuracy) -> dict:
    """Where each of Nanda et al.'s three phases ends (None when not reached):

    - memorisation: the first checkpoint with every training pair right;
    - circuit_formation: the test loss has come 10% of its way (in log) down from its peak
      after memorisation towards its final value: the clean-up, in which the memorised part is
      decayed away and the test loss falls, has begun;
    - cleanup: it has come 90% of the way, in a run whose last checkpoint gets 99% of the
      held-out pairs right (before that the clean-up has not finished, whatever the curve).
    """
    steps = np.asarray(steps)
    done = np.flatnonzero(np.asarray(train_accuracy) >= 1.0)
    memorised = int(steps[done[0]]) if len(done) else None
    after = memorised if memorised is not None else int(steps[-1]) + 1
    finished = np.asarray(test_accuracy)[-1] >= 0.99
    return {
        "memorisation": memorised,
        "circuit_formation": falls_at(steps, np.asarray(test_loss), after, 0.1),
        "cleanup": falls_at(steps, np.asarray(test_loss), after, 0.9) if finished else None,
    }


def input_gradients(params: Params, a, b, c) -> np.ndarray:
    """For each triple, the gradients of the logit of c at `=` of the input `a b =` with respect
    to the input vectors at the positions of a and of b: (n, 2, d_model), one-seed `params`."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    n, p = len(a), params.cfg.d_vocab - 1
    many = Params.stack(params.cfg, [params.seed(0)] * n)  # one input per model
    logits, cache = forward(many, np.stack([a, b, np.full(n, p)], 1)[:, None])
    dlogits = np.zeros(logits.shape)
    dlogits[np.arange(n), 0, 2, c] = 1.0
    # The input at each position is E_token + W_pos[position], so with one sequence per model
    # the gradient of the position embedding is exactly the gradient of the input there.
    return backward(many, cache, dlogits)["pos_embed.W_pos"][:, :2].copy()


def gradient_symmetricity(
    params: Params, p: int, n: int = 100, seed: int = 0, triples=None, chunk: int = 25
) -> float:
    """Zhong et al.'s gradient symmetricity of a one-seed model: over `n` random triples (a, b,
    c), the mean cosine similarity of the gradients of the logit of c at `=` with respect to the
    input embeddings of a and of b. Near 1 for the pizza (the logits see E_a + E_b); lower for
    the clock (the logits multiply E_a and E_b). `triples` (n, 3) gives the (a, b, c) instead
    (analysis.mechanism passes the paper's); `chunk` triples are differentiated at once (each
    is a copy of the model)."""
    if triples is None:
        a, b, c = np.random.default_rng(seed).integers(p, size=(3, n))
    else:
        a, b, c = np.asarray(triples).reshape(-1, 3).T
    grads = np.concatenate(
        [
            input_gradients(params, a[i : i + chunk], b[i : i + chunk], c[i : i + chunk])
            for i in range(0, len(a), chunk)
        ]
    )
    ga, gb = grads[:, 0], grads[:, 1]
    norms = np.linalg.norm(ga, axis=1) * np.linalg.norm(gb, axis=1)
    return float(((ga * gb).sum(1) / np.maximum(norms, 1e-300)).mean())


def distance_irrelevance(logits: np.ndarray, p: int) -> float:
    """Zhong et al.'s distance irrelevance of the logits (p^2, V): put each pair's logit of its
    correct answer at row (a + b) mod p, column (a - b) mod p; the mean over columns of the
    standard deviation within a column, over the standard deviation of all. Near 0 for the
    pizza (the correct logit depends on a - b), near 1 for the clock (it does not); 1 when the
    correct logit is the same for every pair (then it does not depend on a - b either)."""
    a, b = np.divmod(np.arange(p * p), p)
    correct = logits[np.arange(p * p), (a + b) % p]
    table = np.zeros((p, p))
    table[(a + b) % p, (a - b) % p] = correct
    spread = table.std()
    return float(table.std(0).mean() / spread) if spread > 1e-12 else 1.0


def algorithm(params: Params, logits: np.ndarray, p: int) -> dict:
    """Clock or pizza for one checkpoint (Zhong et al.): both measures and the name that the
    distance irrelevance gives by the paper's split (pizza below 0.4, clock above). Like the
    paper, only a model that gets (nearly) every pair right is named: below 99% accuracy over
    all p^2 pairs the name is "none"."""
    q = distance_irrelevance(logits, p)
    right = (logits[:, :p].argmax(-1) == all_pairs(p)[:, :2].sum(1) % p).mean()
    name = "none" if right < 0.99 else "clock" if q >= CLOCK_ABOVE else "pizza"
    return {
        "gradient_symmetricity": gradient_symmetricity(params, p),
        "distance_irrelevance": q,
        "name": name,
    }


def progress(run, steps: list[int] | None = None) -> dict:
    """Every progress measure of a modular-addition run at each checkpoint (default: all), with
    the key frequencies of its last checkpoint, the phases and the clock/pizza test.

    Train and test: the run's own split. Restricted loss: over all p^2 pairs. Excluded loss:
    over the training pairs (both as Nanda et al. define them).
    """
    task = run.task
    p = task.p
    steps = list(run.steps if steps is None else steps)
    params = Params.stack(run.cfg, [run.weights(s) for s in steps])
    logits = pair_logits(params, p)  # (C, p^2, V)
    targets = (all_pairs(p)[:, 0] + all_pairs(p)[:, 1]) % p
    train, test = task.pairs(run.config.get("data_seed", 0))
    keys = key_frequencies(run.weights(steps[-1]), p)
    correct = logits.argmax(-1) == targets
    final = Params.stack(run.cfg, [params.seed(len(steps) - 1)])
    spectra = np.array([spectrum(params["embed.W_E"][i, :p]) for i in range(len(steps))])
    result = {
        "p": p,
        "steps": steps,
        "train_loss": losses(logits[:, train], targets[train]).tolist(),
        "test_loss": losses(logits[:, test], targets[test]).tolist(),
        "train_accuracy": correct[:, train].mean(1).tolist(),
        "test_accuracy": correct[:, test].mean(1).tolist(),
        "restricted_loss": losses(restricted_logits(logits, p, keys), targets).tolist(),
        "excluded_loss": losses(
            excluded_logits(logits, p, keys)[:, train], targets[train]
        ).tolist(),
        "weight_norm": sum(
            (view.reshape(len(steps), -1) ** 2).sum(1) for view in params.views.values()
        ).tolist(),
        "embedding_spectrum": spectra.tolist(),
        "key_frequencies": keys,
        "key_share": float((spectra[-1, keys] ** 2).sum() / (spectra[-1] ** 2).sum()),
    }
    result["phases"] = phases(
        steps, result["train_accuracy"], result["test_loss"], result["test_accuracy"]
    )
    after = result["phases"]["memorisation"] or steps[-1] + 1
    result["falls"] = {
        name: halved_at(np.array(steps), np.array(result[name]), after)
        for name in ("restricted_loss", "test_loss")
    }
    result["algorithm"] = algorithm(final, logits[-1], p)
    return result
