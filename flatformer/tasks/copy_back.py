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

    Measured (bench/tasks_table.py: seeds 0-3, default recipe): the 2-D plane cannot learn it:
    paper-2d ends at 87.7%, 90.7%, 66.2%, 41.0% (median 76.9%; a constant guess errs 87%),
    paper-2d-2layer at 80.2% (our guess at why: one point in the plane must carry both the
    token and a position sharp enough to be picked out by offset). small-4d-2head (487
    parameters, the default) learns it: 0.0%, 2.8%, 0.0%, 0.0% (median 0.0%). Two heads are
    not what it needs: the same 4-D model with one head of 4 also reaches 0.0% for all four
    seeds.
    """

    name = "copy-3-back"
    vocab = [str(i) for i in range(10)] + ["="]
    marker = "="
    focus = "="
    demo = "6 1 7 = 6 3 9 ="
    measured = "0.0% (2-D: 77%)"
    measured_error = 0.0
    default_preset = "small-4d-2head"

    def answer(self, prefix):
        if len(prefix) >= 4 and prefix[-4] < 10:
            return int(prefix[-4]), len(prefix) - 4
        return -1, -1
