"""The graph page: one attribution graph file (flatformer/graph/files.py) as one offline HTML
file, the explorer's template, styles and escaping with the graph's own scripts
(graph-model.js recomputes every link from the file's factors; graph-page.js draws)."""

from __future__ import annotations

import html
from pathlib import Path

from ..store.write import atomic_write, make_folder
from .page import _read, json_for_script, scripts, self_contained

SCRIPTS = ("views.js", "graph-model.js", "graph-page.js")
FORMAT = "flatformer-graph-1"


def graph_page_html(doc: dict) -> str:
    """The complete HTML document of one graph file's contents."""
    return self_contained(
        html.escape(f"flatformer graph · {doc['metadata']['slug']}"),
        _read("tokens.css") + _read("page.css") + _read("graph-page.css"),
        json_for_script({"format": FORMAT, "graph": doc}),
        scripts(SCRIPTS),
    )


def write_graph_pages(docs: list[dict], out) -> list[Path]:
    """Each graph's page as `out/{slug}.html`, beside its JSON."""
    out = make_folder(out, "--out")
    paths = []
    for doc in docs:
        path = out / f"{doc['metadata']['slug']}.html"
        atomic_write(path, graph_page_html(doc).encode())
        paths.append(path)
    return paths
