"""The explorer as a reader's browser shows it: no horizontal overflow from a phone's 360 px to
a 2560 px screen, and no "null", "undefined" or "NaN" printed in any panel of three models."""

import re

import pytest

from browser import close, open_page
from flatformer.explorer import render_html

READY = "() => document.documentElement.dataset.ready === 'true' || !!document.querySelector('.banner.fail')"
WIDTHS = [360, 1280, 2560]
MISSING = re.compile(r"\b(null|undefined|NaN)\b")


@pytest.fixture(scope="module")
def pages(tmp_path_factory, paper_run, simulator_run, two_layer_run):
    folder = tmp_path_factory.mktemp("fit")
    made = {}
    for name, run in (
        ("paper-2d", paper_run),
        ("simulator-16d", simulator_run),
        ("2-layer", two_layer_run),
    ):
        made[name] = folder / f"{name}.html"
        made[name].write_text(render_html(run), encoding="utf-8")
    return made


def overflow(page) -> dict:
    """The page's width against the window's, and the elements that reach past the window."""
    return page.evaluate("""() => {
      const root = document.documentElement, width = root.clientWidth;
      const wide = [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > width + 1 && getComputedStyle(e).position !== 'fixed')
        .filter(e => ![...e.children].some(c => c.getBoundingClientRect().right > width + 1))
        .slice(0, 5).map(e => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`);
      return {scroll: root.scrollWidth, client: width, wide};
    }""")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_explorer_fits_the_window(chromium, pages, width):
    watched = open_page(chromium, pages["paper-2d"].as_uri(), READY, viewport=(width, 800))
    try:
        found = overflow(watched.page)
        assert found["scroll"] <= found["client"], found
    finally:
        close(watched)


@pytest.mark.parametrize("model", ["paper-2d", "simulator-16d", "2-layer"])
def test_no_panel_prints_a_missing_value(chromium, pages, model):
    watched = open_page(chromium, pages[model].as_uri(), READY)
    try:
        texts = watched.page.eval_on_selector_all(
            "section.panel", "els => els.map(e => [e.id, e.innerText])"
        )
        assert len(texts) >= 8
        assert {pid: MISSING.findall(text) for pid, text in texts if MISSING.search(text)} == {}
        assert watched.errors == []
    finally:
        close(watched)


@pytest.fixture(scope="module")
def report_page(tmp_path_factory, paper_run):
    """The run report of the paper's model, with its measured algorithm and circuit and the
    docs' full-size figures standing in for the suite (the page scales each to the window)."""
    import shutil
    from pathlib import Path

    from flatformer.analysis.algorithm import run_checks
    from flatformer.edges.methods import build_problem, find_circuits
    from flatformer.explorer import render_html
    from flatformer.publish.report import Report, render
    from flatformer.store.runs import load_run

    folder = tmp_path_factory.mktemp("report")
    run = load_run(paper_run)
    docs = Path(__file__).parents[1] / "docs"
    figures = []
    for name, source in (
        ("fig15_trace_nudge", "fig15_trace_nudge"),
        ("fig10_landscape_summary", "fig10_landscape_summary"),
        ("fig05_embeddings", "fig05_embeddings"),
        ("supp_circuit", "explorer_circuits"),
        ("fig03_learning_curve", "induction_phase_change"),
    ):
        figures.append(folder / f"{name}.png")
        shutil.copy(docs / f"{source}.png", figures[-1])
    model, data = run.model(run.steps[-1]), run.data()
    rows = [
        {"step": r["step"], "measure": r["measure"], "value": r["shown"]}
        for r in run_checks(model, run.task, data)
    ]
    circuit = find_circuits(
        build_problem(model, run.task, data, "mean", n_prompts=50), methods=("exact",)
    )
    explorer = folder / "explorer.html"
    explorer.write_text(render_html(run), encoding="utf-8")
    report = Report(
        run, [("train", 5.0), ("report", 0.1)], figures, [], rows, explorer, circuit=circuit
    )
    page = folder / "report.html"
    page.write_text(render(report, folder), encoding="utf-8")
    return page


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_fits_the_window(chromium, report_page, width):
    watched = open_page(chromium, report_page.as_uri(), viewport=(width, 800))
    try:
        page = watched.page
        # Images load lazily, as they are scrolled to; made eager here, every one is measured.
        page.eval_on_selector_all("img", "els => els.forEach(e => { e.loading = 'eager'; })")
        page.wait_for_function("() => [...document.images].every(e => e.complete)")
        found = overflow(page)
        assert found["scroll"] <= found["client"], found
        text = page.inner_text("body")
        assert MISSING.findall(text) == []
        # It opens with what the model learned: five steps, each linked to its explorer panel.
        links = page.eval_on_selector_all(".step a", "els => els.map(e => e.getAttribute('href'))")
        assert [link.split("#")[1] for link in links] == [
            "view=embed",
            "view=attend-0",
            "view=attend-0",
            "view=attend-0",
            "view=think-0",
        ]
        assert page.evaluate("document.querySelector('main details').id") == "algorithm"
        assert page.evaluate("document.getElementById('configuration').open") is False
        assert watched.errors == []
    finally:
        close(watched)


def test_a_report_link_opens_the_explorer_at_its_panel(chromium, report_page):
    url = report_page.with_name("explorer.html").as_uri() + "#view=think-0"
    watched = open_page(chromium, url, READY, viewport=(1280, 800))
    try:
        top = watched.page.evaluate(
            "document.getElementById('think-0').getBoundingClientRect().top"
        )
        assert 0 <= top < 200, top
        assert "view=think-0" in watched.page.evaluate("explorer.hash()")
        assert watched.errors == []
    finally:
        close(watched)
