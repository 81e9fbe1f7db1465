"""The playground page as one self-contained HTML file: the engine, the tasks, the Worker's
source and each task's held-out sequences inlined.

Training runs in a Worker built from a blob: URL of inline script text, the only thing the
Content-Security-Policy allows beyond the explorer's (`worker-src blob:`); nothing may be
fetched, and only the page's own script (pinned by its SHA-256) runs. The held-out sequences are
Python's (`Task.split` of data seed 0), so the page's rule error is measured on exactly the set
`flatformer eval` rebuilds for a downloaded run; training sequences come from the page's own
generators (tasks.js).
"""

from __future__ import annotations

import html
import re

from .. import __version__
from ..tasks import get_task
from ..analysis.circuits import TOP_K
from ..config import preset
from ..engine.model import hook_names
from ..readout import BETAS, KL_DIRECTION
from .page import HERE, SCRIPTS, _read, json_for_script, script_digest, scripts

# The Worker's bundle and the page's: both begin with the constants and the forward pass
# (model.js holds the parameter layout the trainer uses).
ENGINE = ("model.js", "train.js", "tasks.js", "session.js")
# The page adds the explorer's scripts (its engine, views, state and panels, without its own
# mounting) so that its panels open on the playground's weights.
EXPLORER = tuple(n for n in SCRIPTS if n not in ENGINE)
PAGE_SCRIPTS = (*ENGINE, *EXPLORER, "runzip.js", "playground-explore.js", "playground.js")
TASKS = ("plus-last-even", "last-odd", "successor", "max-so-far", "copy-3-back", "induction")
PRESETS = ("paper-2d", "paper-2d-2layer", "small-4d-2head", "simulator-16d", "attn-only-2l")

CSS = """
body { font: 14px system-ui, sans-serif; margin: 16px; color: #1f2328; }
.bar { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 6px 0; }
.bar input[type=number] { width: 80px; }
.pg-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(350px, 1fr)); gap: 10px; }
figure { margin: 0; border: 1px solid #d1d9e0; border-radius: 6px; padding: 6px; }
figcaption { font-size: 12px; color: #59636e; }
button { padding: 4px 12px; }
"""


def playground_data() -> dict:
    """What the page carries: the Worker's source and each task's held-out sequences."""
    held = {name: [s.tolist() for s in get_task(name).split(0)[1]] for name in TASKS}
    worker = scripts((*ENGINE, "worker.js"))
    # What the explorer's panels need from Python beyond the weights: each preset's activation
    # names (they do not depend on the vocabulary), the measures' settings, each task's focus.
    explorer = {
        "hooks": {name: hook_names(preset(name, 12)) for name in PRESETS},
        "measures": {"kl": KL_DIRECTION, "betas": list(BETAS), "top_k": TOP_K},
        "focus": {name: get_task(name).focus for name in TASKS},
    }
    return {"version": __version__, "held": held, "workerSource": worker, "explorer": explorer}


def playground_html() -> str:
    """The complete HTML document of the playground."""
    script = scripts(PAGE_SCRIPTS)
    data = playground_data()
    digest = script_digest(script, data["workerSource"])
    csp = (
        f"default-src 'none'; script-src 'sha256-{digest}'; worker-src blob:; "
        f"style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    parts = {
        "CSP": csp,
        "TITLE": html.escape("flatformer playground"),
        "CSS": _read("tokens.css") + _read("page.css") + CSS,
        "DATA": json_for_script(data),
        "SCRIPT": script,
    }
    return re.sub(
        r"__(CSP|TITLE|CSS|DATA|SCRIPT)__",
        lambda m: parts[m.group(1)],
        (HERE / "template.html").read_text(encoding="utf-8"),
    )
