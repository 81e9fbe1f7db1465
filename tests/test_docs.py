"""The docs' promise, kept as the README's is (tests/test_readme.py): every command in the
```bash blocks of every page under docs/ runs verbatim, in a copy of the repository, with
FLATFORMER_MAX_STEPS capping every training job, skipping the same few commands for the same
reasons. Every page's commands run in one shell, in order (so `cd` and variables carry), and
the pages share one checkout, getting-started first: its run folder,
runs/plus-last-even-seed0, is the one the guides read, trained once."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_readme import MAX_STEPS, fresh_checkout, readme_commands, runnable_parts, shims

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FIRST = "getting-started.md"


def pages_with_commands() -> list[str]:
    pages = sorted(
        str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if readme_commands(p.read_text())
    )
    return sorted(pages, key=lambda name: name != FIRST)  # stable: the rest stay sorted


def page_script(text: str) -> str:
    """One bash script of the page's runnable commands, stopping at the first that fails."""
    parts = [part for command in readme_commands(text) for part in runnable_parts(command)]
    return "set -e -o pipefail\n" + "\n".join(parts) + "\n"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    base = tmp_path_factory.mktemp("docs")
    work = base / "checkout"
    fresh_checkout(work)
    env = {
        **os.environ,
        "FLATFORMER_MAX_STEPS": MAX_STEPS,
        "PATH": os.pathsep.join([str(shims(base / "bin")), os.environ["PATH"]]),
        "COLUMNS": "80",
    }
    return work, env


def test_pages_are_found():
    pages = pages_with_commands()
    assert pages[0] == FIRST
    assert "guide/grokking.md" in pages
    script = page_script("```bash\npip install -e .\nflatformer tasks   # all\n```\n")
    assert script.splitlines()[1:] == ["flatformer tasks   # all"]


@pytest.mark.parametrize("page", pages_with_commands())
def test_page_commands_run_verbatim(page, checkout):
    work, env = checkout
    if page != FIRST and not (work / "runs" / "plus-last-even-seed0").is_dir():
        pytest.fail(f"{FIRST} must run first: it trains the run the guides read")
    script = page_script((DOCS / page).read_text())
    result = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"{page}\n{script}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    assert "Traceback" not in result.stdout + result.stderr, page
    assert not re.match(r"\n", result.stdout), f"{page}: a blank first line"


# The API pages' promise: every ```python block of docs/reference.md and docs/api/*.md runs, the
# blocks of a page in order in one interpreter (so names carry from one block to the next), in
# an empty folder, on this tree, with the same step cap as the commands.
API = DOCS / "api"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def api_pages() -> list[str]:
    return ["reference.md", *sorted(f"api/{p.name}" for p in API.glob("*.md"))]


def test_api_pages_have_examples_and_references():
    pages = api_pages()
    names = {"model", "tasks", "train", "runs", "readout", "circuits"}
    assert {f"api/{name}.md" for name in names} <= set(pages)
    for page in pages:
        text = (DOCS / page).read_text()
        assert python_blocks(text), f"{page}: no example"
        assert re.search(r"^::: flatformer\.", text, re.M), f"{page}: no generated reference"
    assert python_blocks("```python\nx = 1\n```\ntext\n```bash\nls\n```\n") == ["x = 1\n"]


def test_reference_covers_the_top_level():
    import flatformer

    text = (DOCS / "reference.md").read_text()
    for name in ("__version__", "show"):  # the names flatformer/__init__.py exports
        assert getattr(flatformer, name) is not None
        assert f"flatformer.{name}" in text, name


def test_api_pages_cover_the_tasks():
    from flatformer.tasks import TASKS

    text = (API / "tasks.md").read_text()
    for name, cls in TASKS.items():
        assert f"::: {cls.__module__}.{cls.__name__}" in text, name


@pytest.mark.parametrize("page", api_pages())
def test_api_examples_run(page, tmp_path):
    code = "\n".join(python_blocks((DOCS / page).read_text()))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLATFORMER_MAX_STEPS": MAX_STEPS}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{page}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"


def test_guides_include_results_that_exist():
    """A guide's measured figures come from a benchmark's results file (the snippets include):
    the file must be in the repository, and the script that writes it beside it in bench/,
    since a missing file would leave the guide silently without its table."""
    included = {
        (page.name, name)
        for page in (DOCS / "guide").glob("*.md")
        for name in re.findall(r'^--8<-- "bench/results/([\w-]+)\.md', page.read_text(), re.M)
    }
    assert {name for _, name in included} >= {"recipes", "grokking", "induction"}
    for page, name in sorted(included):
        assert (ROOT / "bench" / "results" / f"{name}.md").is_file(), f"{page}: {name}"
        assert (ROOT / "bench" / f"{name}.py").is_file(), f"{page}: {name}"
