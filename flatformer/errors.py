"""One exception type for every problem a user can fix: the command line prints it as one line;
and the near-miss suggestions its messages carry (`plus-last-evn` or `plus_last_even` for
plus-last-even: every suggestion is one of the accepted names, so following it works)."""

from __future__ import annotations

import difflib


class FlatformerError(Exception):
    """A problem with the user's input, files or settings, explained in one sentence."""


def canonical(word: str) -> str:
    """The spelling that ignores case and _ against -: how a name is most often mistyped."""
    return word.strip().lower().replace("_", "-")


def closest(word: str, choices) -> str | None:
    """The accepted name nearest `word`, or None when none is near (difflib's ratio >= 0.6)."""
    choices = list(choices)
    same = [c for c in choices if canonical(c) == canonical(str(word))]
    if same:
        return same[0]
    by_canonical = {canonical(c): c for c in choices}
    near = difflib.get_close_matches(canonical(str(word)), list(by_canonical), n=1, cutoff=0.6)
    return by_canonical[near[0]] if near else None


def did_you_mean(word: str, choices) -> str:
    """ " (did you mean NAME?)" for the nearest accepted name, or "" when none is near."""
    near = closest(word, choices)
    return f" (did you mean {near}?)" if near and near != word else ""
