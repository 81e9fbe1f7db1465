"""The explorer page as one self-contained HTML file: template, styles, scripts and data inlined.

The file makes no network request: a Content-Security-Policy allows nothing to be fetched, and
only the page's own script (pinned by its SHA-256) may run, so even a vocabulary word that
smuggled markup into the page could not execute.

The scripts go in as one, in `SCRIPTS` order (each may use those before it): the constants
Python ships, the engine with no DOM (model, measures, edges), the views, the page's state, the
panel groups and last the page that assembles them.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import dataclasses
import re
from pathlib import Path

from ..readout import labels
from ..config import GELU_C, LN_EPS, preset
from ..training.recipes import RECIPES

HERE = Path(__file__).parent
ENGINE = ("model.js", "measures.js", "edges.js")
VIEWS = ("views.js", "heatmap.js", "plane.js", "geometry.js")
PANELS = (
    "kit.js",
    "panels-input.js",
    "panels-blocks.js",
    "panels-readout.js",
    "panels-circuits.js",
)
SCRIPTS = (*ENGINE, *VIEWS, "state.js", *PANELS, "page.js")
# The presets the playground offers (config.PRESETS: a vocabulary's size is the task's).
PLAYGROUND_PRESETS = (
    "paper-2d",
    "paper-2d-2layer",
    "small-4d-2head",
    "simulator-16d",
    "attn-only-2l",
)


def _playground_preset(name: str) -> dict:
    fields = dataclasses.asdict(preset(name, 2))
    del fields["d_vocab"]
    return fields


# The numbers every JavaScript implementation reads from their one home in Python: the page
# trains the default recipe in float64, as the reference computes.
CONSTANTS = {
    "LN_EPS": LN_EPS,
    "GELU_C": GELU_C,
    "MAX_LABEL": labels.MAX_LABEL,
    "PRESETS": {name: _playground_preset(name) for name in PLAYGROUND_PRESETS},
    "RECIPE": {**dataclasses.asdict(RECIPES["default"]), "dtype": "float64"},
}


def _read(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def json_for_script(data: dict) -> str:
    """JSON that is safe inside <script>: `<`, `>` and `&` only occur escaped."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def constants_script() -> str:
    """The script that ships `CONSTANTS` to the page and its Worker, ahead of every other."""
    return f"const FlatConstants = {json_for_script(CONSTANTS)};"


def scripts(names) -> str:
    """The scripts `names`, in order, after the constants: one script's text."""
    return "\n".join([constants_script(), *(_read(name) for name in names)])


def script_digest(script: str, *inlined: str) -> str:
    """The Content-Security-Policy hash of the page's one script (as the template wraps it in
    newlines), refusing a script, or a text inlined in the page, that would end it early."""
    if re.search(r"</script", "".join([script, *inlined]), re.IGNORECASE):
        raise AssertionError("a page script contains '</script', which would end it early")
    return base64.b64encode(hashlib.sha256(f"\n{script}\n".encode()).digest()).decode()


def page_html(data: dict) -> str:
    """The complete HTML document for the page data from `export`."""
    script = scripts(SCRIPTS)
    digest = script_digest(script)
    csp = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        f"img-src data:; base-uri 'none'; form-action 'none'"
    )
    parts = {
        "CSP": csp,
        "TITLE": html.escape(f"flatformer explorer · {data['title']}"),
        "CSS": _read("tokens.css") + _read("page.css"),
        "DATA": json_for_script(data),
        "SCRIPT": script,
    }
    # One pass, so text substituted in (a vocabulary word, say) is never scanned again.
    return re.sub(
        r"__(CSP|TITLE|CSS|DATA|SCRIPT)__", lambda m: parts[m.group(1)], _read("template.html")
    )


def iframe_html(document: str, height: int = 900) -> str:
    """The page inside an <iframe srcdoc>, for embedding in another page or a notebook."""
    return (
        f'<iframe srcdoc="{html.escape(document, quote=True)}" sandbox="allow-scripts" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #d1d9e0;border-radius:8px" '
        f'title="flatformer explorer"></iframe>'
    )
