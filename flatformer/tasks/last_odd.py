"""Retrieval by recency: after `*`, say the most recent odd number."""

from __future__ import annotations

from .base import MarkerTask, Recall


class LastOdd(MarkerTask):
    """After `*`, the next token is the most recent odd number before the `*`.

    Vocabulary: the numbers 0..9 and `*` (11 tokens). Each token is `*` with probability 0.3,
    otherwise a uniform number, except the token right after a `*` with an odd number before it,
    which is forced. The paper's task with the parity flipped and no 10.

    Example: `4 7 2 * 7 6 9 * 9`: the odd numbers before the first `*` are 7, so 7 follows it;
    before the second, 7 and 9, and 9 is the most recent.

    Measured (bench/tasks_table.py: seeds 0-3, default preset and recipe): the paper's plane,
    paper-2d (245 parameters), learns it: rule error 0.0%, 5.2%, 0.0%, 0.1% (median 0.0%;
    a constant guess errs 77%).
    """

    name = "last-odd"
    vocab = [str(i) for i in range(10)] + ["*"]
    marker = "*"
    focus = "*"
    demo = "3 8 * 3 5 2 6 *"
    measured = "0.0%"
    measured_error = 0.0
    recall = Recall(
        "*",
        tuple(str(i) for i in range(1, 10, 2)),
        tuple(str(i) for i in range(0, 10, 2)),
        ("odd", "even", "*"),
    )

    def answer(self, prefix):
        for p in range(len(prefix) - 2, -1, -1):
            if prefix[p] < 10 and prefix[p] % 2 == 1:
                return int(prefix[p]), p
        return -1, -1
