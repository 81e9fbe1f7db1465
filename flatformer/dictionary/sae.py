"""Sparse dictionaries as a stack: several widths and sparsities of one kind, on a leading axis,
trained together as the engine trains seeds together. Each forward has its hand-written
backward beside it, in float64.

Shapes: S members, M latents (the widest member; a narrower one has its extra latents switched
off by `alive`), d_in inputs, d_out outputs (d_out = d_in for an autoencoder; a transcoder maps
an MLP's input to its output). SAELens's names and layout: `W_enc` (d_in, M), `b_enc` (M,),
`W_dec` (M, d_out), `b_dec` (d_out,), each with the stack axis first.

The kinds, and the loss each minimises over a batch of N tokens (mean over tokens of a sum over
dimensions, as SAELens's training MSE):

- relu: f = ReLU((x - b_dec) W_enc + b_enc); L = ||y - x_hat||^2 + l1 sum_i f_i ||W_dec[i]||
  (Bricken et al. 2023, "Towards Monosemanticity"; the L1 term weighted by decoder norms is
  Anthropic's April 2024 "Circuits Updates: Training Sparse Autoencoders", its loss equation).
- topk: f = ReLU(TopK_k(pre)) (Gao et al. 2024, "Scaling and evaluating sparse autoencoders",
  eq. 3), L = ||y - x_hat||^2 + alpha L_aux, where L_aux = ||e - e_hat||^2 with e = y - x_hat
  (held fixed) and e_hat = W_dec' of the k_aux largest pre-activations of the dead latents
  (their Section A.2; k_aux = d_in / 2 and the scale min(dead / k_aux, 1) as SAELens).
- batchtopk: the k N largest of ReLU(pre) over the whole batch (Bussmann, Leask & Nanda 2024,
  "BatchTopK Sparse Autoencoders", eq. 2-3), the same AuxK loss; at inference a JumpReLU with
  one threshold, the running mean of the smallest kept activation (their eq. 4; SAELens's
  exponential average).
- jumprelu: f = pre H(pre - theta) with theta = exp(log_theta) learned per latent;
  L = ||y - x_hat||^2 + l0 sum_i H(pre_i - theta_i) (Rajamanoharan et al. 2024, "Jumping
  Ahead", eq. 9); the step's pseudo-derivatives with respect to theta use the rectangle
  kernel K(z) = 1 on (-1/2, 1/2) of bandwidth eps: d f / d theta = -(theta / eps)
  K((pre - theta) / eps) (eq. 11) and d H / d theta = -(1 / eps) K(...) (eq. 12).

A transcoder (Dunefsky, Chlenski & Nanda 2024, "Transcoders Find Interpretable LLM Feature
Circuits", eq. 1-2) is any of these with y the MLP's output and x its input; its input is not
centred by b_dec (SAELens's transcoders refuse `apply_b_dec_to_input`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import FlatformerError

KINDS = ("relu", "topk", "batchtopk", "jumprelu")
OFF = -1e30
PARAMS = ("W_enc", "b_enc", "W_dec", "b_dec", "log_threshold")


@dataclass
class Stack:
    """S dictionaries of one kind. `width` (S,) latents each, `k` (S,) active latents for the
    TopK kinds, `coef` (S,) the sparsity coefficient (l1 for relu, l0 for jumprelu).
    `threshold` (S,) is BatchTopK's inference threshold; `log_threshold` (S, M) JumpReLU's."""

    kind: str
    W_enc: np.ndarray
    b_enc: np.ndarray
    W_dec: np.ndarray
    b_dec: np.ndarray
    width: np.ndarray
    k: np.ndarray
    coef: np.ndarray
    centre: bool = True  # subtract b_dec from the input (autoencoders, not transcoders)
    log_threshold: np.ndarray | None = None
    threshold: np.ndarray | None = None
    bandwidth: float = 0.05
    aux_coef: float = 1 / 32
    meta: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.width)

    @property
    def alive(self) -> np.ndarray:
        """(S, M): True for the latents a member has (its first `width`)."""
        return np.arange(self.W_enc.shape[-1])[None] < self.width[:, None]

    def params(self) -> dict[str, np.ndarray]:
        names = PARAMS if self.kind == "jumprelu" else PARAMS[:4]
        return {n: getattr(self, n) for n in names}

    def member(self, s: int) -> dict[str, np.ndarray]:
        """Member s's weights at its own width, SAELens's names; `threshold` (d_sae,) for the
        kinds that have one at inference (JumpReLU, BatchTopK)."""
        m = int(self.width[s])
        out = {
            "W_enc": self.W_enc[s, :, :m],
            "b_enc": self.b_enc[s, :m],
            "W_dec": self.W_dec[s, :m],
            "b_dec": self.b_dec[s],
        }
        if self.kind == "jumprelu":
            out["threshold"] = np.exp(self.log_threshold[s, :m])
        elif self.kind == "batchtopk":
            out["threshold"] = np.full(m, float(self.threshold[s]))
        return out


def init_stack(
    kind: str,
    d_in: int,
    d_out: int,
    widths,
    ks=None,
    coefs=None,
    centre: bool = True,
    b_dec=None,
    seed: int = 0,
    threshold: float = 0.01,
    bandwidth: float = 0.05,
) -> Stack:
    """A fresh stack: decoder rows random directions, the encoder their transpose, b_enc 0
    (Gao et al. 2024, Section 2.3; Anthropic's April 2024 update), b_dec the data mean if
    given, JumpReLU thresholds at `threshold` (SAELens's jumprelu_init_threshold). The rows are
    unit for the kinds that hold them there; relu's start at norm 0.1 (Anthropic 2024), so
    that the sum of many positive latents does not start far from the data."""
    if kind not in KINDS:
        raise FlatformerError(f"unknown dictionary kind {kind!r}: one of {', '.join(KINDS)}")
    widths = np.asarray(widths, dtype=np.int64)
    S, M = len(widths), int(widths.max())
    ks = np.zeros(S, np.int64) if ks is None else np.broadcast_to(np.asarray(ks), (S,)).copy()
    coefs = np.zeros(S) if coefs is None else np.broadcast_to(np.asarray(coefs, float), (S,))
    if kind in ("topk", "batchtopk") and ((ks < 1) | (ks > widths)).any():
        raise FlatformerError("--k must be at least 1 and at most the dictionary's width")
    if centre and d_in != d_out:
        raise FlatformerError("an autoencoder's input and output must have the same size")
    rng = np.random.default_rng(seed)
    W_dec = rng.standard_normal((S, M, d_out))
    W_dec /= np.linalg.norm(W_dec, axis=-1, keepdims=True)
    if kind == "relu":
        W_dec *= 0.1
    if d_in == d_out:
        W_enc = W_dec.transpose(0, 2, 1).copy()
    else:
        W_enc = rng.standard_normal((S, d_in, M)) / np.sqrt(d_in)
    b_dec = np.zeros((S, d_out)) if b_dec is None else np.tile(np.asarray(b_dec, float), (S, 1))
    log_threshold = np.full((S, M), np.log(threshold)) if kind == "jumprelu" else None
    return Stack(
        kind,
        W_enc,
        np.zeros((S, M)),
        W_dec,
        b_dec,
        widths,
        ks,
        np.array(coefs, dtype=float),
        centre,
        log_threshold,
        np.zeros(S) if kind == "batchtopk" else None,
        bandwidth,
    )


def pre_activations(stack: Stack, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The encoder's input xc (S, N, d_in) and pre-activations (S, N, M), OFF (below anything
    a latent holds, and finite, so that 0 * OFF is 0) where a member has no latent."""
    xc = (
        x[None] - stack.b_dec[:, None, :]
        if stack.centre
        else np.broadcast_to(x, (stack.size,) + x.shape)
    )
    pre = xc @ stack.W_enc + stack.b_enc[:, None, :]
    return xc, np.where(stack.alive[:, None, :], pre, OFF)


def top_gate(values: np.ndarray, k: int) -> np.ndarray:
    """1 at the k largest entries of each row of `values` (N, M), 0 elsewhere. A small k takes
    k passes of argmax (each linear, far cheaper than a partition of every row)."""
    gate = np.zeros(values.shape)
    if k <= 16:
        v, rows = values.copy(), np.arange(values.shape[0])
        for _ in range(k):
            idx = v.argmax(-1)
            gate[rows, idx] = 1.0
            v[rows, idx] = -np.inf
        return gate
    idx = np.argpartition(-values, k - 1, axis=-1)[:, :k]
    np.put_along_axis(gate, idx, 1.0, axis=-1)
    return gate


def batch_top_gate(values: np.ndarray, n: int) -> np.ndarray:
    """1 at the n largest entries of `values` (N, M) as a whole, 0 elsewhere."""
    flat = np.zeros(values.size)
    flat[np.argpartition(-values.ravel(), n - 1)[:n]] = 1.0
    return flat.reshape(values.shape)


def gates(stack: Stack, pre: np.ndarray, training: bool = True) -> np.ndarray:
    """Which latents fire (S, N, M), as 0/1: f = pre * gate. BatchTopK selects over the batch
    when training and applies its threshold otherwise."""
    positive = pre > 0
    if stack.kind == "relu":
        return positive.astype(float)
    if stack.kind == "jumprelu":
        return (pre > np.exp(stack.log_threshold)[:, None, :]).astype(float)
    if stack.kind == "batchtopk" and not training:
        return (pre > stack.threshold[:, None, None]).astype(float) * positive
    gate = np.zeros(pre.shape)
    for s in range(stack.size):
        k = int(stack.k[s])
        if stack.kind == "topk":
            gate[s] = top_gate(pre[s], k)
        else:
            gate[s] = batch_top_gate(np.maximum(pre[s], 0), k * pre.shape[1])
    return gate * positive


def encode(stack: Stack, x: np.ndarray, training: bool = False) -> np.ndarray:
    """Latent activations f (S, N, M) of x (N, d_in), as at inference unless `training`."""
    _, pre = pre_activations(stack, x)
    return pre * gates(stack, pre, training)


def decode(stack: Stack, f: np.ndarray) -> np.ndarray:
    """x_hat = f W_dec + b_dec (S, N, d_out)."""
    return f @ stack.W_dec + stack.b_dec[:, None, :]


def rectangle(z: np.ndarray) -> np.ndarray:
    """The rectangle kernel K(z) = 1 on (-1/2, 1/2) (Rajamanoharan et al. 2024, Section 4)."""
    return ((z > -0.5) & (z < 0.5)).astype(float)


def loss_and_grads(stack: Stack, x: np.ndarray, y: np.ndarray, dead: np.ndarray | None = None):
    """Each member's loss on the batch x (N, d_in) -> y (N, d_out) and the gradient of their
    sum with respect to every parameter. `dead` (S, M) marks the latents AuxK revives (the TopK
    kinds). Returns ({"loss", "mse", "sparsity", "aux", "l0"} each (S,), grads, f)."""
    N = x.shape[0]
    xc, pre = pre_activations(stack, x)
    gate = gates(stack, pre, training=True)
    f = pre * gate
    x_hat = f @ stack.W_dec + stack.b_dec[:, None, :]
    err = x_hat - y[None]
    mse = (err**2).sum(-1).mean(-1)
    g_xhat = 2 * err / N
    g = {"W_dec": f.transpose(0, 2, 1) @ g_xhat, "b_dec": g_xhat.sum(1)}
    g_f = g_xhat @ stack.W_dec.transpose(0, 2, 1)
    sparsity, aux = np.zeros(stack.size), np.zeros(stack.size)
    g_pre_extra = 0.0
    if stack.kind == "relu":
        norms = np.linalg.norm(stack.W_dec, axis=-1)  # (S, M)
        sparsity = stack.coef * (f * norms[:, None, :]).sum(-1).mean(-1)
        g_f = g_f + (stack.coef[:, None] * norms / N)[:, None, :]
        unit = stack.W_dec / np.where(norms > 0, norms, 1.0)[..., None]
        g["W_dec"] += (stack.coef[:, None] * f.sum(1) / N)[..., None] * unit
    g_pre = g_f * gate
    if stack.kind == "jumprelu":
        theta = np.exp(stack.log_threshold)[:, None, :]
        kernel = rectangle((pre - theta) / stack.bandwidth)
        sparsity = stack.coef * gate.sum(-1).mean(-1)
        g_theta = (g_f * -(theta / stack.bandwidth) * kernel).sum(1)  # eq. 11
        g_theta += stack.coef[:, None] / N * (-(1 / stack.bandwidth) * kernel).sum(1)  # eq. 12
        g["log_threshold"] = g_theta * theta[:, 0, :]
    if stack.kind in ("topk", "batchtopk") and dead is not None and dead.any():
        aux, g_aux_pre, g_aux_dec = auxk(stack, pre, y[None] - x_hat, dead)
        g_pre_extra = g_aux_pre
        g["W_dec"] += g_aux_dec
    g_pre = g_pre + g_pre_extra
    g["W_enc"] = xc.transpose(0, 2, 1) @ g_pre
    g["b_enc"] = g_pre.sum(1)
    if stack.centre:  # sum over tokens first: (sum_n g_pre) W_enc^T, not one product per token
        g["b_dec"] -= (g["b_enc"][:, None, :] @ stack.W_enc.transpose(0, 2, 1))[:, 0]
    loss = mse + sparsity + aux
    parts = {"loss": loss, "mse": mse, "sparsity": sparsity, "aux": aux}
    parts["l0"] = (gate > 0).sum(-1).mean(-1)
    return parts, {n: g[n] for n in stack.params()}, f


def auxk(stack: Stack, pre: np.ndarray, residual: np.ndarray, dead: np.ndarray):
    """Gao et al. 2024's auxiliary loss (Section A.2): the k_aux largest pre-activations among
    dead latents reconstruct the residual e = y - x_hat (no bias, e held fixed); scaled by
    aux_coef (their alpha = 1/32) and by min(dead / k_aux, 1) (SAELens). Returns the loss (S,)
    and its gradients with respect to the pre-activations and W_dec."""
    S, N, _ = pre.shape
    loss = np.zeros(S)
    g_pre, g_dec = np.zeros(pre.shape), np.zeros(stack.W_dec.shape)
    for s in range(S):
        n_dead = int((dead[s] & stack.alive[s]).sum())
        if n_dead == 0:
            continue
        k_aux = max(1, residual.shape[-1] // 2)
        scale = min(n_dead / k_aux, 1.0)
        k_aux = min(k_aux, n_dead)
        masked = np.where((dead[s] & stack.alive[s])[None], pre[s], OFF)
        gate = top_gate(masked, k_aux) * (masked > 0)
        a = masked * gate
        diff = a @ stack.W_dec[s] - residual[s]
        c = stack.aux_coef * scale
        loss[s] = c * (diff**2).sum(-1).mean()
        g_e = 2 * c * diff / N
        g_dec[s] = a.T @ g_e
        g_pre[s] = (g_e @ stack.W_dec[s].T) * gate
    return loss, g_pre, g_dec
