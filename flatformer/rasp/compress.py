"""A compiled program squeezed into superposition: its residual stream of d directions (one per
variable and value) projected to D < d dimensions, as tracr's compressed models are (Lindner et
al. 2023, section 5: a linear map of the residual stream, learned so the model keeps the
program's outputs).

With P (d, D), the compressed model is an ordinary model of width D: whatever wrote a direction
of the stream writes through P (W_E P, W_pos P, W_O P, W_out P and their biases) and whatever
read it reads through P^T (P^T W_Q, W_K, W_V, W_in, W_U). Row i of P is where the program's
direction i (`residual[i]`: a variable's value) lives in the compressed stream: the true feature
directions a dictionary can be scored against.

P starts as the stream's top principal directions (at the stream's rank the compression is
lossless: the one-hot directions of a compiled model are linearly dependent, `one` being the
sum of each variable's values) and is trained by Adam on the squared error of the logits at
every position after BOS of every input (the gradient reaches P through the engine's own
backward pass, by the chain rule through the products above); the map with the most positions
right is kept. Nothing else changes. Below the rank the program's outputs are kept only where
the interference between superposed features stays under what the construction tolerates:
the accuracy is measured and recorded, never assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..engine.model import backward, forward
from ..engine.params import Params
from ..errors import FlatformerError
from .compile import CompiledProgram

READS = ("attn.W_Q", "attn.W_K", "attn.W_V", "mlp.W_in")  # per block, (.., d, k)
WRITES = ("attn.W_O", "mlp.W_out", "attn.b_O", "mlp.b_out")  # per block, (.., d) last


def _roles(tensors: dict) -> tuple[list[str], list[str]]:
    """The tensors that read the stream (d on their second-to-last axis) and those that write
    it (d on their last)."""
    reads = [n for n in tensors if n.endswith(READS) or n == "unembed.W_U"]
    writes = [n for n in tensors if n.endswith(WRITES) or n in ("embed.W_E", "pos_embed.W_pos")]
    return reads, writes


def project(tensors: dict, P: np.ndarray) -> dict:
    """The compressed model's tensors: readers P^T W, writers W P."""
    reads, writes = _roles(tensors)
    out = dict(tensors)
    for n in reads:
        out[n] = np.einsum("dD,...dk->...Dk", P, tensors[n])
    for n in writes:
        out[n] = tensors[n] @ P
    return out


def grad_map(tensors: dict, grads: dict, P: np.ndarray) -> np.ndarray:
    """d loss / d P from the compressed model's tensor gradients: W (dW')^T for each reader
    W' = P^T W, W^T dW' for each writer W' = W P."""
    reads, writes = _roles(tensors)
    dP = np.zeros_like(P)
    for n in reads:  # (..., d, k): every head's (d, k) side by side
        w = np.moveaxis(tensors[n], -2, 0).reshape(len(P), -1)
        g = np.moveaxis(grads[n], -2, 0).reshape(P.shape[1], -1)
        dP += w @ g.T
    for n in writes:
        w, g = tensors[n], grads[n]
        dP += w.reshape(-1, w.shape[-1]).T @ g.reshape(-1, g.shape[-1])
    return dP


def principal_map(gram: np.ndarray, width: int) -> np.ndarray:
    """(d, width) orthonormal columns: the top eigenvectors of the stream's (uncentred) Gram
    matrix over every position of every input at every layer, the best linear start: it keeps
    the most of the stream that a projection of this width can."""
    values, vectors = np.linalg.eigh(gram)
    return vectors[:, np.argsort(values)[::-1][:width]]


@dataclass
class Compression:
    """The map (d, D), the compressed program, and how well it keeps the program's outputs."""

    P: np.ndarray
    compressed: CompiledProgram
    loss: float
    accuracy: float  # positions whose argmax is the program's value, over the training inputs
    steps: int
    validation: object = None  # validate.Validation of the compressed model, once run

    def validation_record(self) -> dict | None:
        v = self.validation
        if v is None:
            return None
        return {
            "checked": v.checked,
            "inputs": v.total,
            "exhaustive": v.exhaustive,
            "mismatches": len(v.mismatches),
            "input_accuracy": (v.checked - len(v.mismatches)) / max(v.checked, 1),
        }


def compress(
    compiled: CompiledProgram,
    batches: list[np.ndarray],
    width: int,
    steps: int = 300,
    lr: float = 1e-3,
    progress=None,
) -> Compression:
    """Learn P (d, `width`) on `batches` (token arrays, one per input length, BOS first) so the
    compressed model's argmax at every position after BOS is the uncompressed model's (the
    program's value: validation checked them equal). `progress(step)` is called as it goes."""
    cfg, tensors = compiled.cfg, compiled.tensors
    d = cfg.d_model
    if not 1 <= width < d:
        raise FlatformerError(
            f"--compress takes a width from 1 to {d - 1} (the compiled stream has {d}), got {width}"
        )
    small = replace(cfg, d_model=width)
    full = Params.stack(cfg, [tensors])
    data, gram = [], np.zeros((d, d))
    for tokens in batches:
        clean, cache = forward(full, tokens[None])  # (1, B, T, V): argmax the program's values
        for name, x in cache.items():
            if name.endswith(("hook_resid_pre", "hook_resid_mid", "hook_resid_post")):
                gram += x.reshape(-1, d).T @ x.reshape(-1, d)
        weights = np.ones(clean.shape[:-1])
        weights[..., 0] = 0.0  # BOS's position carries no value
        data.append((tokens[None], clean, clean.argmax(-1), weights))
    P = principal_map(gram, width)
    total = sum(w.sum() for *_, w in data)
    m, v = np.zeros_like(P), np.zeros_like(P)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def loss_and_grad(P):
        params = Params.stack(small, [project(tensors, P)])
        loss, grads, right = 0.0, None, 0.0
        for tokens, clean, targets, weights in data:
            logits, cache = forward(params, tokens)
            diff = (logits - clean) * weights[..., None]
            g = backward(params, cache, 2 * diff / total)
            grads = g.flat if grads is None else grads + g.flat
            loss += float((diff**2).sum()) / total
            right += float(((logits.argmax(-1) == targets) * weights).sum())
        named = params.like(grads).seed(0)
        return loss, grad_map(tensors, named, P), right / total

    best = None
    for step in range(1, steps + 2):
        loss, dP, accuracy = loss_and_grad(P)
        if best is None or (accuracy, -loss) > (best[2], -best[1]):
            best = (P, loss, accuracy)  # the map kept: the most positions right, then the loss
        if step > steps:
            break
        m = b1 * m + (1 - b1) * dP
        v = b2 * v + (1 - b2) * dP**2
        P = P - lr * (m / (1 - b1**step)) / (np.sqrt(v / (1 - b2**step)) + eps)
        if progress is not None:
            progress(step)
    P, loss, accuracy = best
    squeezed = replace(compiled, cfg=small, tensors=project(tensors, P))
    return Compression(P, squeezed, loss, accuracy, steps)
