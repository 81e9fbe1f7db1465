"""The parameters: every tensor a named view, with a leading seed axis S, into one flat buffer
(float64, or float32 when a recipe asks; tensor-major: each tensor's S copies are contiguous),
which makes the optimizer a few vector operations; and PyTorch's default initialisation."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError


class Params:
    """Named views of shape (S, *shape) into one flat buffer of S * n_params numbers."""

    def __init__(
        self, cfg: ModelConfig, n_seeds: int, flat: np.ndarray | None = None, dtype=np.float64
    ):
        self.cfg, self.n_seeds = cfg, n_seeds
        size = n_seeds * cfg.n_params
        self.flat = np.zeros(size, dtype) if flat is None else flat
        if self.flat.shape != (size,):
            raise ValueError(f"flat buffer has {self.flat.size} numbers, expected {size}")
        self.views = {
            name: self.flat[start:stop].reshape(shape)
            for name, start, stop, shape in _layout(cfg, n_seeds)
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def __contains__(self, name: str) -> bool:
        return name in self.views

    def like(self, flat: np.ndarray | None = None) -> "Params":
        """Another Params with the same layout (zeros, or over the given buffer)."""
        return Params(self.cfg, self.n_seeds, np.zeros_like(self.flat) if flat is None else flat)

    def select(self, seeds) -> "Params":
        """A copy holding only the given seeds, in that order."""
        seeds = list(seeds)
        out = Params(self.cfg, len(seeds), dtype=self.flat.dtype)
        for name, view in out.views.items():
            view[...] = self.views[name][seeds]
        return out

    def seed(self, s: int) -> dict[str, np.ndarray]:
        """One seed's tensors, copied out."""
        return {name: view[s].copy() for name, view in self.views.items()}

    def member(self, s: int) -> np.ndarray:
        """One seed's numbers as one vector in the one-seed layout (a new array): how a
        checkpoint holds the optimizer's moments and the explorer the weights."""
        return np.concatenate([view[s].ravel() for view in self.views.values()])

    def members(self) -> np.ndarray:
        """Every seed's `member` at once, one row each: (S, n_params)."""
        return np.concatenate(
            [view.reshape(self.n_seeds, -1) for view in self.views.values()], axis=1
        )

    @classmethod
    def from_members(
        cls, cfg: ModelConfig, vectors: list[np.ndarray], dtype=np.float64
    ) -> "Params":
        """Params holding one-seed vectors (as `member` gives them), one seed each."""
        rows = np.stack(vectors).astype(dtype, copy=False)  # (S, n_params)
        return cls(
            cfg,
            len(vectors),
            np.concatenate([rows[:, start:stop].ravel() for _, start, stop, _ in _layout(cfg, 1)]),
        )

    @classmethod
    def stack(cls, cfg: ModelConfig, tensors: list[dict[str, np.ndarray]]) -> "Params":
        """Params holding the given per-seed tensors, one seed each."""
        params = cls(cfg, len(tensors))
        for name, view in params.views.items():
            for s, t in enumerate(tensors):
                if name not in t:
                    raise FlatformerError(f"checkpoint is missing tensor {name}")
                if t[name].shape != view.shape[1:]:
                    raise FlatformerError(
                        f"checkpoint tensor {name} has shape {t[name].shape}, "
                        f"the config says {view.shape[1:]}"
                    )
                view[s] = t[name]
        return params


@lru_cache(maxsize=64)
def _layout(cfg: ModelConfig, n_seeds: int):
    layout, offset = [], 0
    for name, shape in cfg.param_shapes().items():
        n = n_seeds * math.prod(shape)
        layout.append((name, offset, offset + n, (n_seeds, *shape)))
        offset += n
    return tuple(layout)


def init_params(
    cfg: ModelConfig, rngs: list[np.random.Generator], embed_scale: float = 1.0
) -> Params:
    """PyTorch's default initialisation, one generator per seed.

    Embeddings are N(0, 1) like nn.Embedding (times `embed_scale`), linear maps and their biases
    uniform in +-1/sqrt(fan_in) like nn.Linear, LayerNorm gains 1 and biases 0.
    """
    params = Params(cfg, len(rngs))
    for s, rng in enumerate(rngs):
        for name, view in params.views.items():
            leaf = name.rsplit(".", 1)[1].lstrip("_")  # _W_K: grouped keys (attn_weight)
            shape = view.shape[1:]
            if leaf in ("W_E", "W_pos"):
                view[s] = embed_scale * rng.standard_normal(shape)
            elif leaf in ("w", "b"):  # LayerNorm gain and bias
                view[s] = 1.0 if leaf == "w" else 0.0
            else:
                fan_in = {
                    "W_Q": cfg.d_model,
                    "W_K": cfg.d_model,
                    "W_V": cfg.d_model,
                    "b_Q": cfg.d_model,
                    "b_K": cfg.d_model,
                    "b_V": cfg.d_model,
                    "W_O": cfg.n_heads * cfg.d_head,
                    "W_in": cfg.d_model,
                    "W_gate": cfg.d_model,
                    "b_in": cfg.d_model,
                    "W_out": cfg.d_mlp,
                    "b_out": cfg.d_mlp,
                    "W_U": cfg.d_model,
                    "b_U": cfg.d_model,
                    "b_O": cfg.n_heads * cfg.d_head,
                }[leaf]
                bound = 1.0 / math.sqrt(fan_in)
                view[s] = rng.uniform(-bound, bound, shape)
    return params
