"""Copying: after `=`, repeat the token three places before it."""

from __future__ import annotations

from .base import MarkerTask


class CopyThreeBack(MarkerTask):
    """After `=`, the next token is the number three places before the `=`.

    Vocabulary: the numbers 0..9 and `=` (11 tokens). Each free token is `=` with probability
    0.3, otherwise a uniform number. The token after a `=` is forced when the token three places
    back is a number. Attention must pick a position by its offset from the query, whatever
    token sits there.

    Example: `5 2 8 = 5 1 7 2 = 1`: the first `=` copies the 5 of `5 2 8 =`, the second the 1
    of `1 7 2 =`.

    MEASURED
    """

    name = "copy-3-back"
    vocab = [str(i) for i in range(10)] + ["="]
    marker = "="
    focus = "="
    demo = "6 1 7 = 6 3 9 ="

    def answer(self, prefix):
        if len(prefix) >= 4 and prefix[-4] < 10:
            return int(prefix[-4]), len(prefix) - 4
        return -1, -1
