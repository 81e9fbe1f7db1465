"""Two steps of attention: after `+`, say the number that followed the most recent even."""

from __future__ import annotations

from .base import MarkerTask


class AfterLastEven(MarkerTask):
    """After `+`, the next token is the number that came right after the most recent even number.

    Vocabulary: the numbers 0..10 and `+` (12 tokens, the paper's). Each free token is `+` with
    probability 0.3, otherwise a uniform number. The token after a `+` is forced when the most
    recent even number before the `+` is followed by a number that also lies before the `+`.

    A single layer cannot do it: a key only knows its own token and position, not whether the
    token before it was even. With two layers, the first can write "my predecessor was even"
    into each position (a previous-token head) and the second can look for it: the composition
    behind induction heads.

    Example: `4 7 1 + 7 6 +`: 4 was followed by 7, so 7 follows the first `+`; before the second
    `+` the most recent even is 6, directly before it, so nothing is forced there.

    MEASURED
    """

    name = "after-last-even"
    vocab = [str(i) for i in range(11)] + ["+"]
    marker = "+"
    n_numbers = 11
    focus = "+"
    demo = "8 3 + 3 5 2 9 +"

    def answer(self, prefix):
        for p in range(len(prefix) - 2, -1, -1):
            if prefix[p] < 11 and prefix[p] % 2 == 0:
                follower = prefix[p + 1]
                if p + 1 < len(prefix) - 1 and follower < 11:
                    return int(follower), p
                return -1, -1
        return -1, -1
