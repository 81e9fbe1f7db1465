"""Two steps of attention: after `+`, say the number that followed the most recent even."""

from __future__ import annotations

from .base import MarkerTask


class AfterLastEven(MarkerTask):
    """After `+`, the next token is the number that came right after the most recent even.

    Vocabulary: the numbers 0..10 and `+` (12 tokens, the paper's). Each free token is `+` with
    probability 0.3, otherwise a uniform number. The token after a `+` is forced when the most
    recent even number before the `+` is followed by a number that also lies before the `+`.

    One layer has no exact way to do it: a key only knows its own token and position, not
    whether the token before it was even. With two layers, the first can write "my predecessor
    was even" into each position (a previous-token head) and the second can look for it: the
    composition behind induction heads.

    Example: `4 7 1 + 7 6 +`: 4 was followed by 7, so 7 follows the first `+`; before the second
    `+` the most recent even is 6, directly before it, so nothing is forced there.

    Measured (bench/tasks_table.py: seeds 0-3, default recipe, 20,000 steps): one layer does
    not learn it: paper-2d 82.7% (a constant guess errs 79%), small-4d-2head 30.5%, and even
    simulator-16d, 2,672 parameters, stops at 8.3% (7.8%, 8.2%, 8.4%, 8.9%). The 2-D plane
    with two layers gets part of the way: paper-2d-2layer 27.9% (28.6%, 16.2%, 80.5%, 27.3%).
    small-4d-2head with two layers (852 parameters, the default) learns it: 0.0%, 0.2%, 0.0%,
    0.0% (median 0.0%).
    """

    name = "after-last-even"
    vocab = [str(i) for i in range(11)] + ["+"]
    marker = "+"
    n_numbers = 11
    focus = "+"
    demo = "8 3 + 3 5 2 9 +"
    measured = "0.0% (1 layer: 31%)"
    measured_error = 0.0
    default_preset = "small-4d-2head"
    defaults = {"n_layers": 2}

    def answer(self, prefix):
        for p in range(len(prefix) - 2, -1, -1):
            if prefix[p] < 11 and prefix[p] % 2 == 0:
                follower = prefix[p + 1]
                if p + 1 < len(prefix) - 1 and follower < 11:
                    return int(follower), p
                return -1, -1
        return -1, -1
