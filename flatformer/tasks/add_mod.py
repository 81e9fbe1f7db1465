"""Arithmetic: after `=`, say the sum modulo 5 of the two numbers before it."""

from __future__ import annotations

from .base import MarkerTask


class AddMod5(MarkerTask):
    """After `=`, the next token is the sum modulo 5 of the two numbers just before the `=`.

    Vocabulary: the numbers 0..4 and `=` (6 tokens). Each free token is `=` with probability
    0.3, otherwise a uniform number. The token after a `=` is forced when the two tokens before
    the `=` are numbers.

    Example: `3 4 = 2 1 = 3`: 3 + 4 = 7, which is 2 modulo 5; then the forced 2 and the 1 before
    the next `=` give 3.

    MEASURED
    """

    name = "add-mod-5"
    vocab = [str(i) for i in range(5)] + ["="]
    marker = "="
    n_numbers = 5
    focus = "="
    demo = "1 = 4 0 3 2 4 ="

    def answer(self, prefix):
        if len(prefix) >= 3 and prefix[-2] < 5 and prefix[-3] < 5:
            return int(prefix[-2] + prefix[-3]) % 5, len(prefix) - 3
        return -1, -1
