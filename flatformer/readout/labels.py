"""Token names as display text: a vocabulary word is data, never markup.

One function for every place a token's name is drawn or printed (figures, movies, tables): a
`$` would start matplotlib's mathtext (a word like `$x^$` is then a parse error, and any pair of
dollars renders as math), so each is escaped; a very long word (a corpus may hold one) costs
matplotlib minutes to lay out, so it is cut to MAX_LABEL characters with an ellipsis. The page
escapes HTML itself and cuts its labels with the same limit.
"""

from __future__ import annotations

MAX_LABEL = 24  # characters shown of a token's name; the full name stays in the data


def short(token, limit: int = MAX_LABEL) -> str:
    """`token` as text of at most `limit` characters (an ellipsis marks a cut)."""
    text = str(token)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def label(token, limit: int = MAX_LABEL) -> str:
    """`token` cut to `limit` characters and safe as matplotlib text: every `$` escaped, so no
    mathtext is parsed (a backslash outside mathtext is plain text already)."""
    return short(token, limit).replace("$", r"\$")


def labels(tokens, limit: int = MAX_LABEL) -> list[str]:
    return [label(t, limit) for t in tokens]
