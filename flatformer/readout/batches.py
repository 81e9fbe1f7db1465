"""Prompts of different lengths through the engine: one batch per length."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ..errors import FlatformerError
from ..model.transformer import Transformer


def by_length(prompts) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(rows, batch) for each distinct length, shortest first: `batch` (n, length) stacks the
    prompts at indices `rows` (into `prompts`, ascending)."""
    prompts = [np.asarray(p) for p in prompts]
    lengths = np.array([len(p) for p in prompts])
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        yield rows, np.stack([prompts[i] for i in rows])


def next_token_logits(model: Transformer, prompts, hooks: dict | None = None) -> np.ndarray:
    """Logits (P, V) at the last position of each prompt (prompts may differ in length)."""
    prompts = list(prompts)
    if not prompts:
        raise FlatformerError("no prompts to run")
    result = np.empty((len(prompts), model.cfg.vocab_out))
    for rows, batch in by_length(prompts):
        result[rows] = model(batch, hooks)[:, -1]
    return result
