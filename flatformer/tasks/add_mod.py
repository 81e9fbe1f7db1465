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

    Measured (bench/tasks_table.py: seeds 0-3, default recipe, 20,000 steps unless noted): the
    small models cannot learn it and stay at chance (a constant guess errs 78.7%): paper-2d
    79.9%, paper-2d-2layer 80.4%, small-4d-2head 79.4% (and 80.2% with one head of 4).
    simulator-16d (2,480 parameters, the default) learns it: 0.0% for all four seeds with the
    default 5,000 steps and one candidate (and with 8,000, and 20,000 with eight candidates).
    Two heads are not what it needs: simulator-16d with one head of 16 also reaches 0.0%.
    """

    name = "add-mod-5"
    vocab = [str(i) for i in range(5)] + ["="]
    marker = "="
    n_numbers = 5
    focus = "="
    demo = "1 = 4 0 3 2 4 ="
    measured = "0.0% (2-D: 80%)"
    measured_error = 0.0
    default_preset = "simulator-16d"
    # One candidate: the eight trials rescue plane models stuck in a bad geometry; this wider
    # model does not stall, and one run costs an eighth.
    defaults = {"steps": 5000, "candidates": 1}

    def answer(self, prefix):
        if len(prefix) >= 3 and prefix[-2] < 5 and prefix[-3] < 5:
            return int(prefix[-2] + prefix[-3]) % 5, len(prefix) - 3
        return -1, -1
