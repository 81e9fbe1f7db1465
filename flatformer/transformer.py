"""One trained model, the object users hold: tokens in, logits and named activations out."""

from __future__ import annotations

import numpy as np

from .config import ModelConfig
from .errors import FlatformerError
from .model import Params, forward, hook_names


class Transformer:
    """A single model (no seed axis) over the NumPy engine.

    >>> logits, cache = model.run_with_cache([[3, 1, 11, 4]])
    >>> cache["blocks.0.attn.hook_pattern"].shape   # (batch, head, query, key)
    (1, 1, 4, 4)
    """

    def __init__(self, cfg: ModelConfig, tensors: dict[str, np.ndarray]):
        self.cfg = cfg
        self.params = Params.stack(cfg, [tensors])

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        return self.params.seed(0)

    @property
    def hook_names(self) -> list[str]:
        return hook_names(self.cfg)

    def check_tokens(self, tokens) -> np.ndarray:
        """Tokens as an int array (B, T), with a clear error for anything the model cannot read."""
        arr = np.asarray(tokens)
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise FlatformerError(f"tokens must be a non-empty (batch, position) array, "
                                  f"got shape {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise FlatformerError("tokens must be integers")
        bad = arr[(arr < 0) | (arr >= self.cfg.d_vocab)]
        if bad.size:
            raise FlatformerError(f"token {int(bad[0])} is outside the vocabulary "
                                  f"0..{self.cfg.d_vocab - 1}")
        if arr.shape[1] > self.cfg.n_ctx:
            raise FlatformerError(f"{arr.shape[1]} tokens exceed the context of {self.cfg.n_ctx}")
        return arr.astype(np.int64)

    def run_with_cache(self, tokens, hooks: dict | None = None):
        """Logits (B, T, V) and a dict of every named activation, in `hook_names` order.

        `hooks` maps names to `fn(activation, name) -> activation` (shapes as in the cache).
        """
        tokens = self.check_tokens(tokens)
        seeded = None
        if hooks:
            seeded = {name: (lambda fn: lambda x, n: fn(x[0], n)[None])(fn)
                      for name, fn in hooks.items()}
            unknown = sorted(set(hooks) - set(self.hook_names))
            if unknown:
                raise FlatformerError(f"no activation named {unknown[0]!r}")
        logits, cache = forward(self.params, tokens[None], seeded)
        return logits[0], {name: cache[name][0] for name in self.hook_names}

    def __call__(self, tokens, hooks: dict | None = None) -> np.ndarray:
        return self.run_with_cache(tokens, hooks)[0]
