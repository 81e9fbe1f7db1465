"""One trained model, the object users hold: tokens in, logits and named activations out."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError
from ..engine.model import Params, forward, hook_names


class Transformer:
    """A single model (no seed axis) over the NumPy engine: `cfg` (a `ModelConfig`) and its
    weights `tensors`, named as TransformerLens names them (`embed.W_E`, `pos_embed.W_pos`,
    `blocks.0.attn.W_Q`, ..., `unembed.W_U`). A run folder gives one at any checkpoint
    (`load_run(folder).model(step)`); calling it on tokens returns the logits.

    Examples:
        >>> model = load_run("runs/plus-last-even-seed0").model()   # doctest: +SKIP
        >>> logits, cache = model.run_with_cache([[3, 1, 11, 4]])   # doctest: +SKIP
        >>> cache["blocks.0.attn.hook_pattern"].shape  # (batch, head, query, key)
        (1, 1, 4, 4)
    """

    def __init__(self, cfg: ModelConfig, tensors: dict[str, np.ndarray]):
        self.cfg = cfg
        self.params = Params.stack(cfg, [tensors])

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """The weights by their TransformerLens names, each without the seed axis."""
        return self.params.seed(0)

    @property
    def hook_names(self) -> list[str]:
        """The name of every activation `run_with_cache` records, in the order the forward
        pass computes them: `hook_embed`, `hook_pos_embed`, then per block
        `blocks.L.hook_resid_pre`, the attention's `hook_q`, `hook_k`, `hook_v`,
        `hook_attn_scores`, `hook_pattern`, `hook_z`, `blocks.L.hook_attn_out`, the MLP's
        `hook_resid_mid`, `mlp.hook_pre`, `mlp.hook_post`, `hook_mlp_out` (none in
        attention-only blocks), the LayerNorms' `hook_scale` and `hook_normalized` (pre-LN
        models), and `blocks.L.hook_resid_post`; `ln_final`'s two last when the model has it.

        Each means what it means in TransformerLens except `hook_normalized`: here the
        LayerNorm's output x_hat * w + b, there x_hat before the gain and bias."""
        return hook_names(self.cfg)

    def check_tokens(self, tokens) -> np.ndarray:
        """Tokens as an int array (B, T), with a clear error for anything the model cannot read."""
        arr = np.asarray(tokens)
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise FlatformerError(
                f"tokens must be a non-empty (batch, position) array, got shape {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            raise FlatformerError("tokens must be integers")
        bad = arr[(arr < 0) | (arr >= self.cfg.d_vocab)]
        if bad.size:
            raise FlatformerError(
                f"token {int(bad[0])} is outside the vocabulary 0..{self.cfg.d_vocab - 1}"
            )
        if arr.shape[1] > self.cfg.n_ctx:
            raise FlatformerError(f"{arr.shape[1]} tokens exceed the context of {self.cfg.n_ctx}")
        return arr.astype(np.int64)

    def run_with_cache(self, tokens, hooks: dict | None = None):
        """Logits (B, T, V) and a dict of every named activation, in `hook_names` order, each
        with the batch axis first (TransformerLens's shapes: `hook_pattern` is (B, H, T, T),
        `hook_z` (B, T, H, d_head), a residual stream (B, T, d_model)).

        `tokens` is one sequence (T,) or a batch (B, T) of token ids; anything the model cannot
        read (not integers, outside the vocabulary, longer than `n_ctx`) raises a one-line
        `FlatformerError`. `hooks` maps activation names to `fn(activation, name) ->
        activation`: each runs when the forward pass reaches its activation and what it
        returns (same shape) is what the rest of the pass reads, and what the cache keeps. An
        unknown name raises.

        Examples:
            >>> off = {"blocks.0.attn.hook_z": lambda z, name: np.zeros_like(z)}
            >>> logits, cache = model.run_with_cache([3, 1, 11, 4], hooks=off)  # doctest: +SKIP
            >>> float(abs(cache["blocks.0.hook_attn_out"]).max())
            0.0
        """
        tokens = self.check_tokens(tokens)
        seeded = None
        if hooks:
            seeded = {
                name: (lambda fn: lambda x, n: fn(x[0], n)[None])(fn) for name, fn in hooks.items()
            }
            unknown = sorted(set(hooks) - set(self.hook_names))
            if unknown:
                raise FlatformerError(f"no activation named {unknown[0]!r}")
        logits, cache = forward(self.params, tokens[None], seeded)
        return logits[0], {name: cache[name][0] for name in self.hook_names}

    def __call__(self, tokens, hooks: dict | None = None) -> np.ndarray:
        """The logits of `run_with_cache`, without the cache."""
        return self.run_with_cache(tokens, hooks)[0]
