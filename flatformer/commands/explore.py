"""`flatformer explore`: write the live explorer page for a run, and optionally serve it."""

from __future__ import annotations

import http.server
from pathlib import Path
from typing import Optional

import typer

from ..store import limits
from ..errors import FlatformerError
from .app import app, out


PAGE_MAX_PARAMS = 1_000_000  # what the page recomputes in a browser, opening in about 3 s
MAX_PATH = 2048  # bytes of a request's path; the standard library caps each header line too


def serve_page(page: bytes, port: int):
    """Serve one page on 127.0.0.1 until Ctrl-C."""
    server = make_server(page, port)
    out.print(f"serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def make_server(page: bytes, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 only (never other machines) that serves the one page: GET
    only, no request body, a short path, and a few seconds per connection, so neither a
    malformed request nor a slow one can hold it up."""

    hosts: set[str] = set()  # Host headers naming the address served, filled once bound

    class Page(http.server.BaseHTTPRequestHandler):
        timeout = 5  # seconds a connection may stay silent

        def do_GET(self):
            host = self.headers.get("Host", "")
            if host not in hosts:  # a page elsewhere reaching us through DNS rebinding
                self.send_error(403, "only requests to this machine's loopback names are served")
            elif len(self.path) > MAX_PATH:
                self.send_error(414, f"the path is longer than {MAX_PATH} bytes")
            elif (
                self.headers.get("Content-Length", "0") != "0"
                or "Transfer-Encoding" in self.headers
            ):
                self.send_error(413, "a GET for the page carries no body")
            elif self.path.split("?")[0] not in ("/", "/explorer.html", "/index.html"):
                self.send_error(404, "only the explorer page is served here")
            else:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Security-Policy", "frame-ancestors 'none'")
                self.send_header("X-Frame-Options", "DENY")
                self.end_headers()
                self.wfile.write(page)

        def refuse(self):
            self.send_response(405, "only GET is answered here")
            self.send_header("Allow", "GET")
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = refuse

        def log_message(self, *args):  # quiet: the command prints the address once
            pass

    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    except OSError as exc:
        raise FlatformerError(
            f"cannot serve on 127.0.0.1:{port} ({exc.strerror}); choose another --port"
        ) from None
    bound = server.server_address[1]
    hosts.update(f"{name}:{bound}" for name in ("127.0.0.1", "localhost"))
    return server


@app.command()
def explore(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint the page opens at [last]."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="HTML file [RUN/explorer.html]."),
    serve: bool = typer.Option(False, "--serve", help="Also serve it on 127.0.0.1."),
    port: int = typer.Option(8000, help="Port for --serve, 0..65535 (0: any free port)."),
    checkpoints: Optional[int] = typer.Option(
        None, help="Checkpoints carried for the slider [all, at most 201; fewer for big models]."
    ),
    prompt: Optional[str] = typer.Option(
        None,
        help="The sequence the page opens on, read as generate reads it (text, for a model "
        "with a tokenizer) [the task's demo].",
    ),
):
    """Write the live explorer: one offline HTML file that recomputes every number in the browser."""
    from ..explorer.export import export_run, require_page
    from ..explorer.page import page_html
    from ..store.runs import load_run
    from ..store.write import output_file, write_file

    if serve:
        limits.port(port)
    loaded = load_run(run)
    require_page(loaded.cfg)
    if loaded.cfg.n_params > PAGE_MAX_PARAMS:
        raise FlatformerError(
            f"{run}: {loaded.cfg.n_params:,} parameters, more than the explorer page carries "
            f"({PAGE_MAX_PARAMS:,}); flatformer figures, analyze, geometry, graph and generate "
            "work on it"
        )
    target = output_file(out_file or Path(run) / "explorer.html", "--out")
    data = export_run(loaded, step, checkpoints, prompt)
    page = page_html(data).encode("utf-8")
    write_file(target, page, "--out")  # checked again: the export took a while
    out.print(
        f"{target}: step {data['step']}, {len(data['steps'])} checkpoints, "
        f"{len(page) / 1e6:.1f} MB (works offline: open it in a browser)"
    )
    if serve:
        serve_page(page, port)
