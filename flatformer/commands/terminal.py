"""Text shown to a terminal, escaped: a token, a path or a field from a file may hold control
characters, and a terminal obeys them (ESC ] 0 ; ... BEL sets the window's title; other
sequences move the cursor, rewrite what was printed, or worse). The page shows such text to a
browser as text; the terminal is shown it the same way: every control character as its
escape (`\\x1b`), never the character itself.

`shown` is the one function that does it. Both of the command line's consoles apply it to
everything they print (`EscapeHook`), so no command prints a file's text raw, whichever
command or message it reaches.
"""

from __future__ import annotations

import unicodedata

from rich.segment import Segment

# Bidirectional overrides and isolates are format characters, not controls, but reorder what
# the terminal shows (a file name can read backwards): escaped with the controls.
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
KEPT = set("\n")  # the line breaks the consoles themselves print


def escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """`text` with every control character (C0, DEL, C1) and bidirectional control escaped."""
    if text.isprintable():  # the common case, checked in C
        return text
    return "".join(
        escaped(ch) if ch not in KEPT and (unicodedata.category(ch) == "Cc" or ch in BIDI) else ch
        for ch in text
    )


class Escaped:
    """A renderable drawn as rich draws it, with the text of every segment passed through
    `shown`; the console's own control segments (cursor moves of a progress display) kept."""

    def __init__(self, renderable):
        self.renderable = renderable

    def __rich_console__(self, console, options):
        for segment in console.render(self.renderable, options):
            if segment.control:
                yield segment
            else:
                yield Segment(shown(segment.text), segment.style)


class EscapeHook:
    """A rich render hook: every renderable a console prints is drawn `Escaped`."""

    def process_renderables(self, renderables):
        return [Escaped(r) for r in renderables]
