"""`flatformer playground`: write the training playground page, and optionally serve it."""

from __future__ import annotations

from pathlib import Path

import typer

from ..store import limits
from .app import app, out


@app.command()
def playground(
    out_file: Path | None = typer.Option(None, "--out", help="HTML file [playground.html]."),
    serve: bool = typer.Option(False, "--serve", help="Also serve it on 127.0.0.1."),
    port: int = typer.Option(8000, help="Port for --serve, 0..65535 (0: any free port)."),
):
    """Write the playground: one offline HTML file that trains a transformer in the browser
    (JavaScript, float64, in a Worker) and shows its geometry forming; no run folder needed."""
    from ..explorer.playground_page import playground_html
    from ..store.write import write_file
    from .explore import serve_page

    if serve:
        limits.port(port)
    page = playground_html().encode("utf-8")
    target = write_file(out_file or Path("playground.html"), page, "--out")
    out.print(
        f"{target}: {len(page) / 1e6:.2f} MB (works offline: open it in a browser, "
        f"choose a task and press Train)"
    )
    if serve:
        serve_page(page, port)
