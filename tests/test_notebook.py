"""`flatformer.show`: the explorer as a notebook output; and the committed tour stays clean."""

import html
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import flatformer
from flatformer.errors import FlatformerError
from flatformer.explorer import render_html
from flatformer.publish.notebook import Explorer, show

from conftest import make_run

TOUR = Path(__file__).resolve().parents[1] / "examples" / "tour.ipynb"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("nb") / "run", steps=300, candidates=1)


def srcdoc(frame: str) -> str:
    match = re.fullmatch(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts" [^>]*></iframe>', frame)
    assert match, frame[:200]
    return html.unescape(match.group(1))


def test_show_is_importable_from_the_package():
    assert flatformer.show is show


def test_importing_flatformer_stays_light():
    # show is looked up lazily: a plain import must not pull in the explorer or matplotlib.
    code = (
        "import sys, flatformer; "
        "print(sorted(m for m in ('flatformer.publish.notebook', 'flatformer.explorer', 'matplotlib')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_show_embeds_the_whole_page_in_a_sandboxed_iframe(small_run):
    shown = show(small_run, step=200, height=640)
    assert isinstance(shown, Explorer)
    frame = shown._repr_html_()
    assert "height:640px" in frame
    # The iframe carries the very page render_html builds, escaped so the notebook's HTML parser
    # sees one attribute: the page is intact once the browser unescapes it.
    assert srcdoc(frame) == shown.document == render_html(small_run, 200)
    assert '"' not in frame.split('srcdoc="', 1)[1].split('" sandbox=', 1)[0]
    assert "200" in repr(shown) and "<iframe" not in repr(shown)


def test_show_defaults_to_the_last_checkpoint(small_run):
    from flatformer.store.runs import load_run

    assert show(small_run).document == render_html(load_run(small_run), 300)


def test_show_of_an_in_memory_model(small_run):
    from flatformer.store.runs import load_run

    run = load_run(small_run)
    shown = show(run.model(), vocab=run.vocab)
    assert srcdoc(shown.html) == render_html(run.model(), vocab=run.vocab)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda run: show(run, step=7), "no checkpoint at step 7"),
        (lambda run: show(run.parent / "missing"), "is not a flatformer run"),
        (lambda run: show(run, height=50), "height must be"),
        (lambda run: show(run, height="900"), "height must be"),
    ],
)
def test_show_bad_input_is_one_clear_error(small_run, call, message):
    with pytest.raises(FlatformerError, match=message):
        call(small_run)


def test_show_of_a_model_needs_its_vocab(small_run):
    from flatformer.store.runs import load_run

    with pytest.raises(FlatformerError, match="vocab"):
        show(load_run(small_run).model())


def test_committed_tour_has_no_outputs():
    nb = nbformat.read(TOUR, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the tour has no code"
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, (
        f"cells {dirty} of {TOUR.name} hold outputs; clear them with "
        f"`jupyter nbconvert --clear-output --inplace examples/tour.ipynb`"
    )
    assert nb.metadata.kernelspec.name == "python3"
