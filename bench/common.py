"""What every benchmark shares: the machine it ran on, and where its figures are written.

Each `bench/` script prints its table and writes it, with the machine, date and versions, to
`bench/results/<script>.md`, which the docs include. Measured figures live there, never in
prose or comments: machines differ by up to 2x, so an absolute time names its machine, and
the ratios carry."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("numpy", "numba", "torch", "flatformer"):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name)
            except ImportError:
                continue
        found[name] = getattr(module, "__version__", "?")
    return found


def machine() -> dict[str, str]:
    """The machine, date and versions a result was measured with."""
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "system": f"{platform.system()} {platform.machine()}",
        **versions(),
    }


def write_results(script: str, title: str, body: str) -> Path:
    """Write `body` (Markdown: tables and short notes) under `title` to
    bench/results/<script>.md, headed by the machine it ran on; returns the path."""
    RESULTS.mkdir(exist_ok=True)
    info = machine()
    head = ", ".join(
        f"{k} {v}" for k, v in info.items() if k not in ("date", "cpu", "cores", "system")
    )
    text = (
        f"# {title}\n\nMeasured {info['date']} on {info['cpu']} ({info['cores']} cores, "
        f"{info['system']}); {head}.\n\n{body.rstrip()}\n"
    )
    path = RESULTS / f"{Path(script).stem}.md"
    path.write_text(text)
    return path


class record:
    """Everything the script prints inside `with record(__file__, title):` still goes to stdout,
    and is written as it was printed (a text block) by `write_results` when the block ends
    without an error: the one step a script needs to keep its results. A script that prints
    Markdown (a table) passes `markdown=True` to have it written as Markdown, not as text."""

    def __init__(self, script: str, title: str, markdown: bool = False):
        self.script, self.title, self.lines = script, title, []
        self.markdown = markdown

    def write(self, text: str):
        self.lines.append(text)
        return self.stdout.write(text)

    def flush(self):
        self.stdout.flush()

    def __enter__(self):
        self.stdout, sys.stdout = sys.stdout, self
        return self

    def __exit__(self, kind, value, traceback):
        sys.stdout = self.stdout
        if kind is None:
            text = "".join(self.lines).rstrip()
            body = text if self.markdown else f"```text\n{text}\n```"
            path = write_results(self.script, self.title, body)
            print(f"results written to {path}", file=sys.stderr)
