"""Each head's QK and OV circuits, their singular values and how concentrated they are.

QK = W_Q W_K^T (d x d): the bilinear form a query's and a key's residual vectors are scored by
(before the 1/sqrt(d_head) scale). OV = W_V W_O (d x d): what the head writes for a key it attends
to. Without W_O the heads' outputs are concatenated, so OV is W_V itself (d x d_head): head h
writes into its own d_head slice of the stream, which changes no singular value. Either matrix
has rank at most d_head. A grouped model's head reads its group's W_K and W_V. With rotary
positions a query at i and a key at j are scored by W_Q R(j - i) W_K^T, the keys turned by their
offset: QK here is the form at offset 0 (a query reading its own position's key).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.transformer import Transformer
from ..readout.points import head_weight


@dataclass
class HeadCircuits:
    """One head's QK and OV matrices and their singular values.

    Examples:
        >>> head = head_circuits(model)[0]                    # doctest: +SKIP
        >>> head.QK.shape, head.qk_mass(1)                    # doctest: +SKIP
        ((2, 2), 0.79)
    """

    layer: int
    head: int
    QK: np.ndarray  # (d, d)
    OV: np.ndarray  # (d, d), or (d, d_head) without W_O
    qk_singular: np.ndarray  # descending, length min(shape) of QK
    ov_singular: np.ndarray

    def qk_mass(self, k: int) -> float:
        """Share of QK's squared singular values in its top `k` (`top_k_mass`)."""
        return top_k_mass(self.qk_singular, k)

    def ov_mass(self, k: int) -> float:
        """Share of OV's squared singular values in its top `k` (`top_k_mass`)."""
        return top_k_mass(self.ov_singular, k)


TOP_K = 3  # the default k of the top-k share: `flatformer analyze --k` and the explorer page


def top_k_mass(singular: np.ndarray, k: int) -> float:
    """Share of the squared singular values (the squared Frobenius norm) in the top k."""
    squared = np.sort(np.asarray(singular, dtype=float))[::-1] ** 2
    total = squared.sum()
    return float(squared[:k].sum() / total) if total > 0 else 1.0


def head_circuits(model: Transformer) -> list[HeadCircuits]:
    """QK and OV of every head, layer by layer."""
    cfg, t = model.cfg, model.tensors
    heads = []
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}.attn."
        for h in range(cfg.n_heads):
            W_Q, W_K, W_V = (head_weight(model, w, h, layer) for w in "QKV")
            QK = W_Q @ W_K.T
            OV = W_V @ t[b + "W_O"][h] if cfg.attn_out else W_V.copy()
            heads.append(
                HeadCircuits(
                    layer,
                    h,
                    QK,
                    OV,
                    np.linalg.svd(QK, compute_uv=False),
                    np.linalg.svd(OV, compute_uv=False),
                )
            )
    return heads


def circuit_table(model: Transformer, k: int = TOP_K) -> list[dict]:
    """One row per head: singular values of QK and OV and the share of squared mass in the top
    k (the explorer page shows the same share for k = TOP_K), k at most the rank d_head."""
    rows = []
    rank = model.cfg.d_head
    k = min(k, rank)  # "top 3" of a rank-2 matrix would read as a third direction
    for c in head_circuits(model):
        rows.append(
            {
                "layer": c.layer,
                "head": c.head,
                "k": k,
                "qk_singular": c.qk_singular[:rank].tolist(),
                "ov_singular": c.ov_singular[:rank].tolist(),
                "qk_mass": c.qk_mass(k),
                "ov_mass": c.ov_mass(k),
            }
        )
    return rows
