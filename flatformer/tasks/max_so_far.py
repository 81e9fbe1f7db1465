"""Comparison: after `M`, say the largest number so far."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .base import MarkerTask


class MaxSoFar(MarkerTask):
    """After `M`, the next token is the largest number so far in the sequence.

    Vocabulary: the numbers 0..9 and `M` (11 tokens). Sequences are 10 to 20 tokens long (the
    maximum of a long stream is nearly always 9). Each free token is `M` with probability 0.3,
    otherwise a uniform number; the token after an `M` is forced once any number has appeared.
    The earliest position the answer depends on is the last place the maximum appeared: a
    window that shows it holds the answer (everything before it is no larger).

    Example: `2 5 M 5 3 M 5 7 M 7`: the maximum is 5, then still 5 (3 is smaller), then 7.

    Measured (bench/tasks_table.py: seeds 0-3, default preset and recipe): paper-2d (245
    parameters) learns every case but one: 1.8%, 1.8%, 1.8%, 2.2% (median 1.8%; a constant
    guess errs 64%). Seed 0's errors are exactly the positions where every number so far is 0:
    it answers 1, its 0 zone squeezed out. The smallest preset that learns it fully is
    paper-2d-2layer (0.0%, 0.0%, 0.0%, 1.8%); small-4d-2head reaches 0.0% for all four seeds.
    """

    name = "max-so-far"
    vocab = [str(i) for i in range(10)] + ["M"]
    marker = "M"
    focus = "M"
    demo = "1 4 M 4 2 6 3 M"
    measured = "1.8% (only max 0 fails)"
    measured_error = 0.018
    min_len = 10
    max_len = 20

    def answer(self, prefix):
        numbers = [(int(t), p) for p, t in enumerate(prefix[:-1]) if t < 10]
        if not numbers:
            return -1, -1
        top = max(t for t, _ in numbers)
        return top, max(p for t, p in numbers if t == top)

    def corrupt(self, inputs, index, rng):
        """Every occurrence of the maximum so far lowered to one smaller number (uniformly), or,
        when the maximum is 0, one 0 raised: the maximum, so the target, changes. (A single
        change cannot always do it: the maximum may appear twice.)"""
        inputs = np.array(inputs, dtype=np.int64)
        targets = np.empty(len(inputs), dtype=np.int64)
        for w, i in enumerate(index):
            prefix = inputs[w, : i + 1]  # a view: edits change the window
            top = self.forced_after(prefix)[0]
            if top < 0:
                raise FlatformerError(f"corrupt: no number before position {i} of window {w}")
            if top > 0:
                prefix[prefix == top] = rng.integers(0, top)
            else:
                prefix[rng.choice(np.flatnonzero(prefix == 0))] = rng.integers(1, 10)
            targets[w] = self.forced_after(prefix)[0]
        return inputs, targets
