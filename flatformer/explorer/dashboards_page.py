"""The feature dashboards page of a dictionary as one self-contained HTML file: the explorer's
template, style tokens, views and kit, the encoder (sae.js) and the page (dashboards.js), with
the numbers `dictionary/dashboards.py` computed. As the explorer's page, it makes no network
request (its Content-Security-Policy allows nothing to be fetched) and runs only its own script,
pinned by its SHA-256.
"""

from __future__ import annotations

import html
import re

from .page import _read, json_for_script, script_digest, scripts

SCRIPTS = ("views.js", "heatmap.js", "kit.js", "sae.js", "dashboards.js")


def dashboards_html(data: dict) -> str:
    """The complete HTML document for `dictionary.dashboards.dashboards`'s data."""
    script = scripts(SCRIPTS)
    body = json_for_script(data)
    digest = script_digest(script, body)
    csp = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        f"img-src data:; base-uri 'none'; form-action 'none'"
    )
    parts = {
        "CSP": csp,
        "TITLE": html.escape(f"flatformer dashboards · {data['title']}"),
        "CSS": _read("tokens.css") + _read("page.css") + _read("dashboards.css"),
        "DATA": body,
        "SCRIPT": script,
    }
    return re.sub(
        r"__(CSP|TITLE|CSS|DATA|SCRIPT)__",
        lambda m: parts[m.group(1)],
        _read("template.html"),
    )
