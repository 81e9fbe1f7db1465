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


def default_focus_position(n_ctx: int) -> int:
    """The query position the focus figures use: two thirds into the context, so that some keys
    are visible and some are hidden by the causal mask."""
    return min(n_ctx - 1, (2 * n_ctx) // 3)


# The point figures draw every token at every position while there are at most MAX_POINTS of
# them (the paper's 12 x 8, a modular-addition model's 114 x 3); past that a cloud of thousands
# of labelled points is neither readable nor cheap (their labels cost time and memory), so they
# show the MAX_TOKENS most frequent tokens at MAX_POSITIONS evenly spaced positions.
MAX_POINTS = 512
MAX_TOKENS = 12
MAX_POSITIONS = 8


@dataclass
class Shown:
    """The tokens (vocabulary indices, ascending) and positions (ascending) the point figures
    show, out of the model's `d_vocab` and `n_ctx`, and how the tokens were chosen."""

    tokens: np.ndarray
    positions: np.ndarray
    d_vocab: int
    n_ctx: int
    chosen_by: str = ""

    @property
    def every(self) -> bool:
        return len(self.tokens) == self.d_vocab and len(self.positions) == self.n_ctx

    def local(self, token: int, position: int) -> tuple[int, int]:
        """A (token, position) pair as indices into the shown arrays."""
        return int(np.searchsorted(self.tokens, token)), int(
            np.searchsorted(self.positions, position)
        )

    @property
    def note(self) -> str:
        """What a figure showing these points says about them ("" when it shows every one)."""
        if self.every:
            return ""
        tokens = (
            "every token"
            if len(self.tokens) == self.d_vocab
            else f"{len(self.tokens)} of {self.d_vocab:,} tokens ({self.chosen_by})"
        )
        positions = (
            "every position"
            if len(self.positions) == self.n_ctx
            else f"{len(self.positions)} of {self.n_ctx:,} positions"
        )
        return f"{tokens} at {positions}"


def shown_points(
    d_vocab: int, n_ctx: int, counts: np.ndarray, focus: int, focus_position: int
) -> Shown:
    """Every point while there are at most MAX_POINTS; else the MAX_TOKENS tokens with the
    largest `counts` (their frequency in the held-out text; ties to the lower index) and the
    focus token, at MAX_POSITIONS evenly spaced positions and the focus position."""
    every_token, every_position = np.arange(d_vocab), np.arange(n_ctx)
    if d_vocab * n_ctx <= MAX_POINTS:
        return Shown(every_token, every_position, d_vocab, n_ctx)
    tokens, chosen_by = every_token, ""
    if d_vocab > MAX_TOKENS:
        ranked = np.argsort(-np.asarray(counts, dtype=float), kind="stable")
        top = [t for t in ranked if t != focus][: MAX_TOKENS - 1]
        tokens = np.sort(np.array([focus, *top], dtype=int))
        chosen_by = "the most frequent in the held-out text"
    positions = every_position
    if n_ctx > MAX_POSITIONS:
        spaced = np.linspace(0, n_ctx - 1, MAX_POSITIONS - 1).round().astype(int)
        positions = np.unique(np.append(spaced, focus_position))
    return Shown(tokens, positions, d_vocab, n_ctx, chosen_by)


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
