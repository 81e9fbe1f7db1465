"""The explorer inside a notebook: `flatformer.show(run)` as a cell's last line draws it inline.

    import flatformer
    flatformer.show("runs/plus-last-even-seed0")            # the last checkpoint
    flatformer.show(run, step=2000, height=700)

The page comes as an `<iframe srcdoc>` sandboxed to scripts only: its styles and scripts cannot
touch the notebook's, and the notebook's cannot touch it. Everything it needs (code, styles,
weights) travels inside the output, so it needs no network: in JupyterLab, VS Code, and the HTML
that nbconvert exports. (Like any output with scripts, Jupyter shows it only in a trusted
notebook: one reopened from disk shows it again once the cell is re-run.)
"""

from __future__ import annotations

from pathlib import Path

from ..errors import FlatformerError
from ..store.runs import Run, load_run
from ..model.transformer import Transformer


class Explorer:
    """The explorer page for one run (or one model), displayed by Jupyter via `_repr_html_`.

    The page is built when `show` is called, so a bad run or step fails at once with a clear
    error rather than as a broken output. `.html` is the iframe; `.document` the page itself,
    which is also a standalone file a browser opens directly.
    """

    def __init__(self, document: str, height: int, label: str):
        from ..explorer import iframe_html

        self.document = document
        self.height = height
        self.label = label
        self.html = iframe_html(document, height)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        # What a terminal, or a front end that cannot show HTML, prints instead of the page.
        return f"<flatformer explorer: {self.label}; display it in a notebook to see the page>"


def show(
    run: Run | str | Path | Transformer,
    step: int | None = None,
    *,
    height: int = 900,
    vocab: list[str] | None = None,
    max_checkpoints: int | None = None,
) -> Explorer:
    """The explorer for `run` (a run folder, a loaded `Run`, or a `Transformer` with `vocab`),
    opening at checkpoint `step` (default: the last), to display inline in a notebook.

    Example, in a notebook cell after `flatformer train plus-last-even`:

    >>> import flatformer
    >>> flatformer.show("runs/plus-last-even-seed0", height=700)   # doctest: +SKIP
    """
    from ..explorer import render_html

    if not isinstance(height, int) or isinstance(height, bool) or not 200 <= height <= 10_000:
        raise FlatformerError(
            f"show: height must be a whole number of pixels in 200..10000, not {height!r}"
        )
    if isinstance(run, Transformer):
        label = f"an in-memory model ({run.cfg.n_params} parameters)"
    else:
        if not isinstance(run, Run):
            run = load_run(run)
        step = run.resolve_step(step)
        label = f"{Path(run.path).name} at step {step}"
    document = render_html(run, step, vocab=vocab, max_checkpoints=max_checkpoints)
    return Explorer(document, height, label)
