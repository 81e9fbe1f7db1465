"""The loss of a run on a text: every token after the first predicted once, in order.

The text is cut into consecutive windows of the model's context (the last one shorter); each
token is predicted from the window it falls in, so a token early in a window sees less context
than one late in it, as in nanoGPT's and most language models' evaluation.

Example: a text of 10 tokens and a context of 4 gives windows 0-3, 4-7 and 8 (predicting
tokens 1-4, 5-8 and 9): nine predictions, each counted once.
"""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from ..store.read import read_text

MAX_TOKENS = 100_000
MAX_BYTES = 64 << 20
BATCH = 64


def text_loss(model, task, path) -> dict:
    """Mean cross-entropy (nats per token) of `model` on the text file `path`, encoded with the
    run's task, over its last MAX_TOKENS tokens."""
    text = read_text(path, "corpus", MAX_BYTES)
    try:
        tokens = np.asarray(task.encode(text), dtype=np.int64)
    except FlatformerError as exc:
        raise FlatformerError(f"corpus {path}: {exc}") from None
    cut = max(len(tokens) - MAX_TOKENS, 0)
    tokens = tokens[cut:]
    if len(tokens) < 2:
        raise FlatformerError(f"corpus {path} has {len(tokens)} tokens; the loss needs 2")
    V = model.cfg.vocab_out
    if tokens[1:].max() >= V:
        bad = int(tokens[1:][tokens[1:] >= V][0])
        raise FlatformerError(
            f"corpus {path}: token {task.vocab[bad]!r} (id {bad}) is one the model never "
            f"predicts (it predicts ids 0..{V - 1})"
        )
    T = model.cfg.n_ctx
    starts = np.arange(0, len(tokens) - 1, T)
    total, count = 0.0, 0
    full = starts[starts + T < len(tokens)]
    for lo in range(0, len(full), BATCH):
        s = full[lo : lo + BATCH, None] + np.arange(T)
        total += _nll(model(tokens[s]), tokens[s + 1])
        count += s.size
    if len(full) < len(starts):  # the shorter last window
        last = np.arange(starts[-1], len(tokens) - 1)
        total += _nll(model(tokens[last][None]), tokens[last + 1][None])
        count += len(last)
    return {"loss": total / count, "predictions": count, "tokens": len(tokens), "cut": cut}


def _nll(logits: np.ndarray, targets: np.ndarray) -> float:
    top = logits.max(-1, keepdims=True)
    logz = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return float((logz - picked).sum())
