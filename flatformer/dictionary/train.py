"""Training a stack of dictionaries with Adam on activations held in memory.

The recipe, from the papers each kind cites (flatformer/dictionary/sae.py):
- inputs (and a transcoder's outputs) scaled by one constant each so that E||x|| = sqrt(d)
  (Anthropic's April 2024 update; SAELens's `expected_average_only_in`), the scale folded back
  into the weights at the end, so the saved dictionary reads raw activations;
- b_dec starts at the mean of the targets;
- decoder rows held at unit norm for topk, batchtopk and jumprelu (Gao et al. 2024, Section
  2.3; Rajamanoharan et al. 2024, Section 4), with the gradient's component along each row
  removed before the step; relu leaves them free, its penalty weighs them (Anthropic 2024);
- a latent is dead for AuxK when it has not fired over the last `dead_tokens` training tokens
  (Gao et al. 2024 count 10M tokens; ours are smaller data sets);
- Adam (Kingma & Ba 2015) with beta1 0.9, beta2 0.999.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from .sae import Stack, init_stack, loss_and_grads


@dataclass
class Recipe:
    steps: int = 3000
    batch: int = 1024
    lr: float = 3e-3
    seed: int = 0
    dead_tokens: int = 20_000
    bandwidth: float = 0.05
    threshold_lr: float = 0.01  # BatchTopK's running threshold (SAELens's topk_threshold_lr)


class Adam:
    """Adam on a dict of arrays (Kingma & Ba 2015, Algorithm 1)."""

    def __init__(self, params: dict, lr: float, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = {n: np.zeros_like(p) for n, p in params.items()}
        self.v = {n: np.zeros_like(p) for n, p in params.items()}

    def step(self, params: dict, grads: dict):
        self.t += 1
        for n, g in grads.items():
            self.m[n] = self.b1 * self.m[n] + (1 - self.b1) * g
            self.v[n] = self.b2 * self.v[n] + (1 - self.b2) * g * g
            m_hat = self.m[n] / (1 - self.b1**self.t)
            v_hat = self.v[n] / (1 - self.b2**self.t)
            params[n] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def norm_scale(a: np.ndarray) -> float:
    """The constant c with E||c a|| = sqrt(d) (Anthropic, April 2024)."""
    mean = float(np.linalg.norm(a, axis=-1).mean())
    return float(np.sqrt(a.shape[-1]) / mean) if mean > 0 else 1.0


def unit_rows(W: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(W, axis=-1, keepdims=True)
    return W / np.where(norms > 0, norms, 1.0)


def train_stack(
    kind: str,
    x: np.ndarray,
    y: np.ndarray | None = None,
    widths=(8,),
    ks=None,
    coefs=None,
    recipe: Recipe | None = None,
    progress=None,
) -> tuple[Stack, list[dict]]:
    """Train one dictionary per (width, k, coef) on x (N, d_in) -> y (N, d_out; None: an
    autoencoder, y = x). Members of one width train together as one stack, on the same batches;
    each width is its own stack (padding a narrow member to the widest would cost the widest's
    time), and the result is one stack padded to the widest. Returns the stack (in the raw
    activations' units) and the loss history (one row per 100 steps, each member's loss parts).
    `progress(i, n, message)` is called as training goes."""
    recipe = recipe or Recipe()
    widths = np.asarray(widths, dtype=np.int64)
    S = len(widths)
    ks = np.zeros(S, np.int64) if ks is None else np.broadcast_to(np.asarray(ks), (S,))
    coefs = np.zeros(S) if coefs is None else np.broadcast_to(np.asarray(coefs, float), (S,))
    groups = [np.flatnonzero(widths == w) for w in dict.fromkeys(widths.tolist())]
    if len(groups) == 1:
        return train_group(kind, x, y, widths, ks, coefs, recipe, progress)
    trained = []
    for g, idx in enumerate(groups):

        def step_progress(i, n, message, g=g):
            progress(g * n + i, len(groups) * n, message)

        trained.append(
            train_group(
                kind, x, y, widths[idx], ks[idx], coefs[idx], recipe, progress and step_progress
            )
        )
    return merge(kind, groups, trained, widths, ks, coefs)


def merge(kind, groups, trained, widths, ks, coefs) -> tuple[Stack, list[dict]]:
    """One stack, padded to the widest member, from stacks trained width by width."""
    first = trained[0][0]
    S, M = len(widths), int(widths.max())
    d_in, d_out = first.W_enc.shape[1], first.W_dec.shape[2]
    stack = Stack(
        kind,
        np.zeros((S, d_in, M)),
        np.zeros((S, M)),
        np.zeros((S, M, d_out)),
        np.zeros((S, d_out)),
        widths,
        np.array(ks),
        np.array(coefs, dtype=float),
        first.centre,
        np.zeros((S, M)) if kind == "jumprelu" else None,
        np.zeros(S) if kind == "batchtopk" else None,
        first.bandwidth,
        first.aux_coef,
        dict(first.meta),
    )
    for idx, (part, _) in zip(groups, trained):
        w = int(part.width[0])
        stack.W_enc[idx, :, :w] = part.W_enc
        stack.b_enc[idx, :w] = part.b_enc
        stack.W_dec[idx, :w] = part.W_dec
        stack.b_dec[idx] = part.b_dec
        if kind == "jumprelu":
            stack.log_threshold[idx, :w] = part.log_threshold
        if kind == "batchtopk":
            stack.threshold[idx] = part.threshold
    history = []
    for rows in zip(*(h for _, h in trained)):
        row = {"step": rows[0]["step"]}
        for key in rows[0]:
            if key != "step":
                values = [0.0] * S
                for idx, r in zip(groups, rows):
                    for j, i in enumerate(idx):
                        values[i] = r[key][j]
                row[key] = values
        history.append(row)
    return stack, history


def train_group(kind, x, y, widths, ks, coefs, recipe: Recipe, progress):
    """Members of one width, as one stack (see `train_stack`)."""
    x = np.asarray(x, dtype=np.float64)
    transcoder = y is not None
    y = x if y is None else np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape[0] != x.shape[0] or len(x) == 0:
        raise FlatformerError(f"activations must be (tokens, d) arrays, got {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise FlatformerError("the activations hold NaN or infinite values")
    c_in = norm_scale(x)
    c_out = norm_scale(y) if transcoder else c_in
    xs, ys = x * c_in, y * c_out
    stack = init_stack(
        kind,
        x.shape[1],
        y.shape[1],
        widths,
        ks,
        coefs,
        centre=not transcoder,
        b_dec=ys.mean(0),
        seed=recipe.seed,
        bandwidth=recipe.bandwidth,
    )
    unit = kind != "relu"
    params = stack.params()
    adam = Adam(params, recipe.lr)
    rng = np.random.default_rng(recipe.seed)
    since_fired = np.zeros((stack.size, stack.W_enc.shape[-1]))
    batch = min(recipe.batch, len(xs))
    history = []
    for step in range(recipe.steps):
        idx = rng.integers(0, len(xs), batch)
        dead = since_fired > recipe.dead_tokens
        parts, grads, f = loss_and_grads(stack, xs[idx], ys[idx], dead)
        if not np.isfinite(parts["loss"]).all():
            raise FlatformerError(f"dictionary training diverged at step {step}: lower --lr")
        fired = (f != 0).any(1)
        since_fired = np.where(fired, 0, since_fired + batch)
        if unit:
            W = stack.W_dec
            grads["W_dec"] = grads["W_dec"] - (grads["W_dec"] * W).sum(-1, keepdims=True) * W
        adam.step(params, grads)
        if unit:
            stack.W_dec[...] = unit_rows(stack.W_dec)
        if kind == "batchtopk":
            update_threshold(stack, f, recipe.threshold_lr, first=step == 0)
        if step % 100 == 0 or step == recipe.steps - 1:
            history.append({"step": step, **{k: v.tolist() for k, v in parts.items()}})
            if progress:
                progress(step + 1, recipe.steps, f"loss {float(parts['loss'].mean()):.4g}")
    fold_scale(stack, c_in, c_out)
    stack.meta.update({"scale_in": c_in, "scale_out": c_out, "steps": recipe.steps})
    return stack, history


def update_threshold(stack: Stack, f: np.ndarray, lr: float, first: bool):
    """BatchTopK's inference threshold: a running mean of the smallest positive activation
    kept in each batch (Bussmann et al. 2024, eq. 4; SAELens's update)."""
    for s in range(stack.size):
        kept = f[s][f[s] > 0]
        if kept.size:
            low = float(kept.min())
            stack.threshold[s] = low if first else (1 - lr) * stack.threshold[s] + lr * low


def fold_scale(stack: Stack, c_in: float, c_out: float):
    """Trained on (c_in x, c_out y): the same dictionary on raw x and y. The pre-activations are
    unchanged (so thresholds and TopK choices are), the outputs divided by c_out."""
    stack.W_enc *= c_in  # pre = (c x - b) W + b_enc = (x - b / c)(c W) + b_enc
    stack.W_dec /= c_out
    stack.b_dec /= c_out
