"""The atlas's phase-diagram page: one offline HTML file, no script. A table of cells (a bin of
attn_coeff by a second knob), each showing the fraction of its runs that learned each
mechanism; a click on a cell lists its runs (the CSS `:target` of the cell's section), each a
link to the run's explorer page. Every string on the page goes through `html.escape`, and the
page may fetch nothing (Content-Security-Policy: default-src 'none')."""

from __future__ import annotations

import html
import math
from urllib.parse import quote

COLORS = {"clock": (0, 114, 178), "pizza": (230, 159, 0), "other": (153, 153, 153)}
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px}
.note{color:#59636e;margin:4px 0 14px}
table.diagram{border-collapse:collapse;margin:8px 0}
table.diagram th{font-weight:600;padding:4px 6px;font-size:12px;text-align:center}
table.diagram th.row{text-align:right}
td.cell{padding:0;border:1px solid #d1d9e0;min-width:74px;height:76px}
td.cell a{display:block;height:76px;box-sizing:border-box;padding:4px 6px;color:#1f2328;text-decoration:none;
font-size:12px;line-height:1.3}
td.cell a:hover,td.cell a:focus{outline:2px solid #0969da}
td.empty{background:#f6f8fa}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border-radius:4px;color:#fff}
section.runs{display:none;border-top:1px solid #d1d9e0;margin-top:12px}
section.runs:target{display:block}
table.list{border-collapse:collapse} table.list td,table.list th{padding:2px 10px;text-align:left}
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _cell_style(fractions: dict) -> str:
    """The majority mechanism's colour, as strong as its share."""
    kind = max(fractions, key=lambda k: fractions[k])
    r, g, b = COLORS.get(kind, COLORS["other"])
    return f"background:rgba({r},{g},{b},{0.15 + 0.6 * fractions[kind]:.2f})"


def _run_link(run: dict, explorer: str | None) -> str:
    name = f"{_e(run['job'])} · seed {_e(run['seed'])}"
    if explorer is None:
        return name
    path = f"{run['job']}/seed_{run['seed']}/{explorer}"
    return f'<a href="{_e(quote(path))}">{name}</a>'


def _value(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) and math.isfinite(v) else str(v)


def atlas_html(diagram: dict, title: str, explorer: str | None = "explorer.html") -> str:
    """The page for `atlas.phase.phase_diagram`'s output; runs link to `explorer` in their run
    folders (relative to the atlas folder, where the page is written), or, with None (no
    pages written), are named with the command that writes one."""
    x, y = diagram["x"], diagram["y"]
    kinds = diagram["kinds"]
    total = int(diagram["total"].sum())
    head = "".join(f"<th>{_e(label)}</th>" for label in diagram["x_labels"])
    body, sections = [], []
    for i in reversed(range(len(diagram["y_labels"]))):
        cells = []
        for j, x_label in enumerate(diagram["x_labels"]):
            n = int(diagram["total"][i, j])
            if not n:
                cells.append('<td class="cell empty"></td>')
                continue
            counts = {k: int(diagram["counts"][i, j, m]) for m, k in enumerate(kinds)}
            fractions = {k: c / n for k, c in counts.items()}
            lines = "<br>".join(f"{_e(k)} {fractions[k]:.0%}" for k in kinds if counts[k])
            ident = f"cell-{i}-{j}"
            where = f"{x} {x_label}" + (f" · {y} {diagram['y_labels'][i]}" if y else "")
            cells.append(
                f'<td class="cell"><a href="#{ident}" style="{_cell_style(fractions)}" '
                f'title="{_e(where)}">{lines}<br>n={n}</a></td>'
            )
            keys = [x] + ([y] if y else [])
            rows = "".join(
                f"<tr><td>{_run_link(run, explorer)}</td><td>{_e(run['mechanism'])}</td>"
                + "".join(f"<td>{_e(_value(run[k]))}</td>" for k in keys)
                + "</tr>"
                for run in diagram["runs"][i][j]
            )
            summary = ", ".join(f"{c} {_e(k)}" for k, c in counts.items() if c)
            sections.append(
                f'<section class="runs" id="{ident}"><h2>{_e(where)}: {n} runs ({summary})'
                f'</h2><table class="list"><tr><th>run (its explorer page)</th>'
                f"<th>mechanism</th>" + "".join(f"<th>{_e(k)}</th>" for k in keys) + "</tr>"
                f"{rows}</table></section>"
            )
        label = _e(diagram["y_labels"][i]) if y else ""
        body.append(f'<tr><th class="row">{label}</th>{"".join(cells)}</tr>')
    legend = "".join(
        f'<span style="background:rgb{COLORS.get(k, COLORS["other"])}">{_e(k)}</span>'
        for k in kinds
    )
    left_out = (
        f" {diagram['left_out']} runs without a measured mechanism are left out."
        if diagram["left_out"]
        else ""
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>{_e('flatformer atlas · ' + title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e('Atlas · ' + title)}</h1>"
        f'<p class="note">{total} runs, binned by {_e(x)}'
        + (f" (columns) and {_e(y)} (rows)" if y else "")
        + f"; each cell: the share of its runs that learned each mechanism.{_e(left_out)} "
        + (
            "Click a cell to list its runs; each links to its explorer page.</p>"
            if explorer
            else "Click a cell to list its runs. Their explorer pages were not written: "
            "<code>flatformer explore ATLAS/JOB/seed_S</code> writes one.</p>"
        )
        + f'<p class="legend">{legend}</p>'
        f'<table class="diagram"><tr><th class="row">{_e(y or "")}</th>{head}</tr>'
        f'{"".join(body)}<tr><th></th><th colspan="{len(diagram["x_labels"])}">{_e(x)}</th>'
        "</tr></table>" + "".join(sections) + "</body></html>\n"
    )
