"""The live browser explorer: one offline HTML file that recomputes its numbers from the weights
at any checkpoint and with any knob (the circuit's edge set, the induction head scores and
modular-addition's key phases come computed by Python, as the export says).

>>> from flatformer.explorer import render_html
>>> page = render_html("runs/plus-last-even-seed0")          # the whole document, as a string
>>> frame = render_html("runs/plus-last-even-seed0", inline=True)   # an <iframe srcdoc=...>
"""

from __future__ import annotations

from pathlib import Path

from ..store.runs import Run
from ..model.transformer import Transformer
from .export import export_model, export_run
from .page import iframe_html, page_html


def render_html(
    run: Run | str | Path | Transformer,
    step: int | None = None,
    inline: bool = False,
    *,
    vocab: list[str] | None = None,
    max_checkpoints: int | None = None,
    height: int = 900,
) -> str:
    """The explorer page for a run (or an in-memory `Transformer` with `vocab`).

    `step` is the checkpoint it opens at (default: the last). With `inline=True` the page comes
    wrapped in an `<iframe srcdoc>` (sandboxed to scripts only), ready for a notebook's
    `_repr_html_` or any other page.
    """
    if isinstance(run, Transformer):
        if vocab is None:
            from ..errors import FlatformerError

            raise FlatformerError("render_html of a model needs its vocab")
        data = export_model(run, vocab, step=step or 0)
    else:
        data = export_run(run, step, max_checkpoints)
    document = page_html(data)
    return iframe_html(document, height) if inline else document


__all__ = ["render_html", "export_run", "export_model", "page_html", "iframe_html"]
