"""Sequences as arrays the engine can batch: training windows with loss masks, and the fixed
held-out sets for the loss and the rule error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FlatformerError
from .base import Task

VAL_WINDOWS = 400
# The rule error reads one window per constrained position: past a task's `rule_tokens`
# positions in all (default RULE_TOKENS; an imported text's 20,000 windows of 64 are 1.3
# million), an evenly spaced sample of max(RULE_MIN_WINDOWS, rule_tokens // n_ctx) of them.
# Every task here stays under the default.
RULE_TOKENS = 2**18
RULE_MIN_WINDOWS = 16


def evenly_spaced(n: int, k: int) -> np.ndarray:
    """At most `k` indices into range(n), evenly spaced with the first and last included: how
    every capped set of held-out windows (and of exported checkpoints) is chosen. Held-out sets
    may be ordered (modular-addition's pairs by their first number): the first k would be a
    biased sample."""
    if n <= k:
        return np.arange(n)
    return np.linspace(0, n - 1, k).round().astype(int)


@dataclass
class Corpus:
    """Sequences laid end to end, with each position's rule target and source as global indices."""

    tokens: np.ndarray  # (L,)
    target: np.ndarray  # (L,) forced token or -1
    source: np.ndarray  # (L,) global index of the token the target depends on, or -1
    starts: np.ndarray  # (n_seqs,) where each sequence begins
    ends: np.ndarray  # (n_seqs,) one past where it ends
    # What the rule error counts (only built for held-out sets): `Task.allowed` per position.
    allowed: np.ndarray | None = None  # (L, V) tokens the rule allows
    allowed_source: np.ndarray | None = None  # (L,) global index deciding it, or -1
    # Which targets count in the loss (`Task.answer_only`: the forced ones); None: every one.
    counted: np.ndarray | None = None  # (L,) bool

    @classmethod
    def from_sequences(
        cls, task: Task, seqs: list[np.ndarray], with_allowed: bool = False
    ) -> "Corpus":
        lengths = np.array([len(s) for s in seqs])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])

        def globalise(sources):
            return np.concatenate(
                [np.where(src >= 0, src + start, -1) for src, start in zip(sources, starts)]
            )

        targets, sources = zip(*(task.rule(s) for s in seqs))
        corpus = cls(
            np.concatenate(seqs),
            np.concatenate(targets),
            globalise(sources),
            starts,
            starts + lengths,
        )
        if task.answer_only:
            corpus.counted = corpus.target >= 0
        if with_allowed:
            masks, allowed_sources = zip(*(task.allowed(s) for s in seqs))
            corpus.allowed = np.concatenate(masks)
            corpus.allowed_source = globalise(allowed_sources)
        return corpus

    def window_starts(self, n_ctx: int) -> np.ndarray:
        """Every start of a window of n_ctx inputs plus one target inside one sequence."""
        return np.concatenate([np.arange(s, e - n_ctx) for s, e in zip(self.starts, self.ends)])

    def windows(self, starts: np.ndarray, n_ctx: int, drop_unseen: bool):
        """Inputs, targets and loss weights for windows beginning at `starts` (any shape).

        With `drop_unseen`, a forced target whose source lies before the window gets weight 0:
        no model could predict it from what it sees; so does every target the corpus does not
        count (`counted`).
        """
        idx = starts[..., None] + np.arange(n_ctx + 1)
        inputs, targets = self.tokens[idx[..., :-1]], self.tokens[idx[..., 1:]]
        weights = (
            np.ones(targets.shape)
            if self.counted is None
            else self.counted[idx[..., 1:]].astype(np.float64)
        )
        if drop_unseen:
            pos = idx[..., 1:]
            unseen = (self.target[pos] >= 0) & (self.source[pos] < starts[..., None])
            weights[unseen] = 0.0
        return inputs, targets, weights

    def rule_windows(self, n_ctx: int):
        """For every constrained position (by `Task.allowed`) whose deciding tokens the context
        can see: the window of inputs ending just before it (left-aligned at the sequence start
        when near it), the index in that window of the prediction, the forced target (-1 when
        the rule allows several tokens) and the allowed tokens (R, V)."""
        pos = np.flatnonzero(self.allowed_source >= 0)
        seq = np.searchsorted(self.starts, pos, side="right") - 1
        start = np.maximum(self.starts[seq], pos - n_ctx)
        seen = self.allowed_source[pos] >= start
        pos, start = pos[seen], start[seen]
        # Near the end of the corpus a window may run past it; positions after the prediction
        # cannot change it (causal attention), so they repeat its last input.
        idx = np.minimum(start[:, None] + np.arange(n_ctx), (pos - 1)[:, None])
        return self.tokens[idx], pos - 1 - start, self.target[pos], self.allowed[pos]


@dataclass
class TaskData:
    """A task's fixed training corpus and held-out evaluation sets for one context length."""

    train: Corpus
    held_out: Corpus
    train_starts: np.ndarray
    val_inputs: np.ndarray
    val_targets: np.ndarray
    val_weights: np.ndarray  # 1 where a held-out target counts in the loss
    rule_inputs: np.ndarray
    rule_index: np.ndarray
    rule_targets: np.ndarray  # (R,) the forced target, or -1 where several tokens are allowed
    rule_allowed: np.ndarray  # (R, V) the tokens the rule allows: a top prediction outside errs
    rule_total: int = -1  # constrained positions before sampling (rule_windows_kept); -1: R

    @classmethod
    def build(cls, task: Task, n_ctx: int, data_seed: int = 0) -> "TaskData":
        if task.labelled:
            return task.labelled_data(n_ctx)
        train_seqs, held_seqs = task.split(data_seed)
        train = Corpus.from_sequences(task, train_seqs)
        held = Corpus.from_sequences(task, held_seqs, with_allowed=True)
        # Held-out loss: 400 fixed windows (the source's 50 batches of 8), evenly spaced over
        # the non-overlapping windows of the held-out sequences: no sampling noise between
        # evaluations, at half the cost of all of them. A task of fixed examples counts all.
        val_starts = np.concatenate(
            [np.arange(s, e - n_ctx, n_ctx) for s, e in zip(held.starts, held.ends)]
        )
        if not len(val_starts):  # a held-out loss and rule error over nothing: refused
            longest = int(max(held.ends - held.starts, default=0))
            hint = f"--set n_ctx={longest - 1}" if longest > 1 else "a task with held-out data"
            raise FlatformerError(
                f"task {task.name}: its held-out data ({longest} tokens at most in a "
                f"sequence) is no longer than the context ({n_ctx}), so no held-out window "
                f"can be measured; try {hint} or a longer text"
            )
        if not task.answer_only:
            val_starts = val_starts[evenly_spaced(len(val_starts), VAL_WINDOWS)]
        val_inputs, val_targets, val_weights = held.windows(val_starts, n_ctx, drop_unseen=False)
        rule = held.rule_windows(n_ctx)
        total = len(rule[0])
        kept = rule_windows_kept(total, n_ctx, getattr(task, "rule_tokens", RULE_TOKENS))
        rule = tuple(a[kept] for a in rule)
        rule_inputs, rule_index, rule_targets, rule_allowed = rule
        return cls(
            train,
            held,
            train.window_starts(n_ctx),
            val_inputs,
            val_targets,
            val_weights,
            rule_inputs,
            rule_index,
            rule_targets,
            rule_allowed,
            total,
        )


def rule_windows_kept(total: int, n_ctx: int, budget: int = RULE_TOKENS) -> np.ndarray:
    """Which of `total` rule-error windows of n_ctx positions are measured: all of them up to
    `budget` positions, else an evenly spaced max(RULE_MIN_WINDOWS, budget // n_ctx)."""
    if total * n_ctx <= budget:
        return np.arange(total)
    return evenly_spaced(total, max(RULE_MIN_WINDOWS, budget // n_ctx))
