"""Arithmetic: after `+`, say the number before it plus one."""

from __future__ import annotations

from .base import MarkerTask


class Successor(MarkerTask):
    """After `+`, the next token is the number just before the `+` plus one, modulo 10.

    Vocabulary: the numbers 0..9 and `+` (11 tokens). Each free token is `+` with probability
    0.3, otherwise a uniform number. The token after a `+` is forced when a number precedes it
    (after `+ +` it is free).

    Example: `3 + 4 9 + 0 + 1`: 3 + gives 4, 9 + gives 0 (modulo 10), and the forced 0 is itself
    followed by `+`, giving 1.

    Measured (bench/tasks_table.py: seeds 0-3, default preset and recipe): paper-2d (245
    parameters) learns it: rule error 0.0% for all four seeds (a constant guess errs 89%). The
    plane only has to move each number's zone onto the next one's.
    """

    name = "successor"
    vocab = [str(i) for i in range(10)] + ["+"]
    marker = "+"
    focus = "+"
    demo = "5 2 8 + 9 1 7 +"
    measured = "0.0%"
    measured_error = 0.0

    def answer(self, prefix):
        if len(prefix) >= 2 and prefix[-2] < 10:
            return int(prefix[-2] + 1) % 10, len(prefix) - 2
        return -1, -1
