"""Sequences as arrays the engine can batch: training windows with loss masks, and the fixed
held-out sets for the loss and the rule error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tasks.base import Task


@dataclass
class Corpus:
    """Sequences laid end to end, with each position's rule target and source as global indices."""

    tokens: np.ndarray     # (L,)
    target: np.ndarray     # (L,) forced token or -1
    source: np.ndarray     # (L,) global index of the token the target depends on, or -1
    starts: np.ndarray     # (n_seqs,) where each sequence begins
    ends: np.ndarray       # (n_seqs,) one past where it ends

    @classmethod
    def from_sequences(cls, task: Task, seqs: list[np.ndarray]) -> "Corpus":
        lengths = np.array([len(s) for s in seqs])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        targets, sources = zip(*(task.rule(s) for s in seqs))
        source = np.concatenate([np.where(src >= 0, src + start, -1)
                                 for src, start in zip(sources, starts)])
        return cls(np.concatenate(seqs), np.concatenate(targets), source, starts,
                   starts + lengths)

    def window_starts(self, n_ctx: int) -> np.ndarray:
        """Every start of a window of n_ctx inputs plus one target inside one sequence."""
        return np.concatenate([np.arange(s, e - n_ctx) for s, e in zip(self.starts, self.ends)])

    def windows(self, starts: np.ndarray, n_ctx: int, drop_unseen: bool):
        """Inputs, targets and loss weights for windows beginning at `starts` (any shape).

        With `drop_unseen`, a forced target whose source lies before the window gets weight 0:
        no model could predict it from what it sees.
        """
        idx = starts[..., None] + np.arange(n_ctx + 1)
        inputs, targets = self.tokens[idx[..., :-1]], self.tokens[idx[..., 1:]]
        weights = np.ones(targets.shape)
        if drop_unseen:
            pos = idx[..., 1:]
            unseen = (self.target[pos] >= 0) & (self.source[pos] < starts[..., None])
            weights[unseen] = 0.0
        return inputs, targets, weights

    def rule_windows(self, n_ctx: int):
        """For every position with a forced target the context can see: the window of inputs
        ending just before it (left-aligned at the sequence start when near it), the index in
        that window of the prediction, and the target."""
        pos = np.flatnonzero(self.target >= 0)
        seq = np.searchsorted(self.starts, pos, side="right") - 1
        start = np.maximum(self.starts[seq], pos - n_ctx)
        seen = self.source[pos] >= start
        pos, start = pos[seen], start[seen]
        inputs = self.tokens[start[:, None] + np.arange(n_ctx)]
        return inputs, pos - 1 - start, self.target[pos]


@dataclass
class TaskData:
    """A task's fixed training corpus and held-out evaluation sets for one context length."""

    train: Corpus
    held_out: Corpus
    train_starts: np.ndarray
    val_inputs: np.ndarray
    val_targets: np.ndarray
    rule_inputs: np.ndarray
    rule_index: np.ndarray
    rule_targets: np.ndarray

    @classmethod
    def build(cls, task: Task, n_ctx: int, data_seed: int = 0) -> "TaskData":
        train_seqs, held_seqs = task.split(data_seed)
        train = Corpus.from_sequences(task, train_seqs)
        held = Corpus.from_sequences(task, held_seqs)
        # Held-out loss: every non-overlapping window, so the number has no sampling noise.
        val_starts = np.concatenate([np.arange(s, e - n_ctx, n_ctx)
                                     for s, e in zip(held.starts, held.ends)])
        val_inputs, val_targets, _ = held.windows(val_starts, n_ctx, drop_unseen=False)
        rule_inputs, rule_index, rule_targets = held.rule_windows(n_ctx)
        return cls(train, held, train.window_starts(n_ctx), val_inputs, val_targets,
                   rule_inputs, rule_index, rule_targets)
