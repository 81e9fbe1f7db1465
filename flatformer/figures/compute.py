"""What the figures (and the movie frames) need beyond the numeric layer: the task's focus token
and position, the tokens and positions the point figures show, what its rule allows along a
sequence, and sampled sequences. The numbers
themselves (planes, every token at every position, Q/K/V, head outputs, the output landscape,
one sequence's trace) live in `flatformer.readout`; they are re-exported here under the names
the figure modules use (`from . import compute as C`). Nothing here draws, prints or saves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from ..readout import (
    BlockTrace,
    Embeddings,
    Field,
    Landscape,
    NotApplicable,
    NotInPlane,
    Plane,  # noqa: F401
    Projections,
    Trace,
    all_points_tokens,
    embeddings,
    fit_plane,
    fitted_limits,
    grid,
    head_outputs,
    head_weight,
    landscape,
    output_logits,
    point_label,
    point_scores,
    projections,
    qk_field,
    require_plane,
    rows_per_pass,
    softmax,
    square_limits,
    trace,
)
from ..readout.points import (
    MAX_POINTS,
    MAX_POSITIONS,
    MAX_TOKENS,
    Shown,
    default_focus_position,
    held_out_counts,
    shown_points,
)  # noqa: F401  (figures read them as C.*)
from ..readout.sampling import continue_prompts
from ..tasks.base import Task
from ..model.transformer import Transformer

SLICE_NOTE = "background: the plane's slice of the head space (keys off the plane score otherwise)"


class NotDrawn(NotApplicable):
    """A figure this model does not get, with why and what gives it instead (the `figures`
    command names it as skipped and draws the others)."""


def focus_token(task: Task) -> int:
    """Index of the token whose query the figures focus on (`task.focus`)."""
    if task.focus not in task.vocab:
        raise FlatformerError(
            f"task {task.name} declares no focus token in its vocabulary (focus={task.focus!r})"
        )
    return task.vocab.index(task.focus)


def rule_status(task: Task, seq: np.ndarray, n_ctx: int) -> np.ndarray:
    """Per position of `seq`: 1 when its token is one the task's rule allows there, 0 when the
    rule forbids it, -1 when the rule is silent or what decides it lies beyond the `n_ctx`
    tokens a model predicting that position could see."""
    seq = np.asarray(seq)
    mask, source = task.allowed(seq)
    idx = np.arange(len(seq))
    counted = (source >= 0) & (source >= idx - n_ctx)
    return np.where(counted, mask[idx, seq].astype(int), -1)


def next_allowed(task: Task, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the token after each position of `tokens`: the tokens the rule allows (T, V) and
    whether the rule decides it at all (T,). The rule is asked about the sequence extended by
    one (arbitrary) token."""
    mask, source = task.allowed(np.append(np.asarray(tokens), 0))
    return mask[1:], source[1:] >= 0


def generate(
    model: Transformer, prompts: np.ndarray, length: int, seed: int = 0, temperature: float = 1.0
) -> np.ndarray:
    """Continue each prompt (B, P) to `length` tokens with the one sampler
    (`readout.sampling`), sliding the context window.

    Sampling (not greedy) shows what the model believes everywhere, including unconstrained
    positions; the seed makes the figure reproducible.
    """
    return continue_prompts(model, prompts, length, seed, temperature)
