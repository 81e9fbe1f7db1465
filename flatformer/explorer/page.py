"""The explorer page as one self-contained HTML file: template, styles, scripts and data inlined.

The file makes no network request: a Content-Security-Policy allows nothing to be fetched, and
only the page's own script (pinned by its SHA-256) may run, so even a vocabulary word that
smuggled markup into the page could not execute.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

HERE = Path(__file__).parent
SCRIPTS = ("model.js", "views.js", "geometry.js", "page.js")


def _read(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def json_for_script(data: dict) -> str:
    """JSON that is safe inside <script>: `<`, `>` and `&` only occur escaped."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_html(data: dict) -> str:
    """The complete HTML document for the page data from `export`."""
    script = "\n".join(_read(name) for name in SCRIPTS)
    if re.search(r"</script", script, re.IGNORECASE):
        raise AssertionError("a page script contains '</script', which would end it early")
    digest = base64.b64encode(hashlib.sha256(f"\n{script}\n".encode()).digest()).decode()
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           f"img-src data:; base-uri 'none'; form-action 'none'")
    parts = {"CSP": csp, "TITLE": html.escape(f"flatformer explorer · {data['title']}"),
             "CSS": _read("page.css"), "DATA": json_for_script(data), "SCRIPT": script}
    # One pass, so text substituted in (a vocabulary word, say) is never scanned again.
    return re.sub(r"__(CSP|TITLE|CSS|DATA|SCRIPT)__", lambda m: parts[m.group(1)],
                  _read("template.html"))


def iframe_html(document: str, height: int = 900) -> str:
    """The page inside an <iframe srcdoc>, for embedding in another page or a notebook."""
    return (f'<iframe srcdoc="{html.escape(document, quote=True)}" sandbox="allow-scripts" '
            f'style="width:100%;height:{int(height)}px;border:1px solid #d1d9e0;border-radius:8px" '
            f'title="flatformer explorer"></iframe>')
