"""The main job end to end, and its report in a real browser."""

import subprocess
import sys

import pytest

from browser import close, open_page

READY = (
    "() => document.documentElement.dataset.ready === 'true' || "
    "!!document.querySelector('.banner.fail')"
)


def reproduce(out, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "flatformer",
            "reproduce",
            "--out",
            str(out),
            "--set",
            "steps=2000",
            *extra,
        ],
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "out"
    result = reproduce(out)
    assert result.returncode == 0, result.stderr[-2000:]
    return out, result


def test_every_stage_shows_progress_and_writes_its_part(made):
    out, result = made
    for i, stage in enumerate(["train", "figures", "movies", "explorer", "analysis", "report"]):
        assert f"{i + 1}/6 {stage}" in result.stdout + result.stderr
    run = out / "run"
    assert len(list((run / "figures").glob("step_002000/*.png"))) == 22
    assert len(list((run / "movies").glob("*.mp4"))) == 5
    assert len(list((run / "movies").glob("*.gif"))) == 5
    assert (run / "explorer.html").exists() and (out / "analysis.json").exists()
    # It ends with a short summary (numbers and where things are), not the analysis tables.
    # The summary is the result, on stdout (`reproduce > log` keeps it); the stages on stderr.
    printed = result.stdout + result.stderr
    tail = [line for line in result.stdout.splitlines() if line.strip()]
    assert "6/6 report" in result.stderr and "6/6 report" not in result.stdout
    assert 6 <= len(tail) <= 12, tail
    assert tail[0].startswith("done in ") and "rule error" in tail[0]
    assert any("report.html" in line for line in tail) and "Knobs" not in printed
    assert "[bold]" not in printed and "[/]" not in printed  # headings styled, not markup shown


def test_the_report_loads_every_image_and_movie_offline(made, chromium):
    out, _ = made
    report = out / "report.html"
    watched = open_page(chromium)
    page = watched.page
    failed = []
    # A video with preload="metadata" cancels its request once it has the metadata: Chromium
    # reports that as net::ERR_ABORTED, which is no failure (the videos are checked below).
    page.on(
        "requestfailed",
        lambda r: (
            failed.append(r.url)
            if r.failure != "net::ERR_ABORTED" or not r.url.endswith(".mp4")
            else None
        ),
    )
    page.goto(report.as_uri())
    page.wait_for_load_state("load")
    # Images load lazily, as they are scrolled to; made eager here, every one loads.
    lazy = page.eval_on_selector_all("img", "els => els.map(e => e.loading)")
    assert len(lazy) == 22 and set(lazy) == {"lazy"}
    page.eval_on_selector_all("img", "els => els.forEach(e => { e.loading = 'eager'; })")
    page.wait_for_function("() => [...document.images].every(e => e.complete)")
    images = page.eval_on_selector_all("img", "els => els.map(e => [e.src, e.naturalWidth])")
    assert all(width > 0 for _, width in images), images
    # A table of contents that stays in view, linking every section; sections fold.
    links = page.eval_on_selector_all("nav.toc a", "els => els.map(e => e.getAttribute('href'))")
    sections = page.eval_on_selector_all("main > details", "els => els.map(e => '#' + e.id)")
    assert sections and set(sections) <= set(links)
    assert page.evaluate("getComputedStyle(document.querySelector('nav.toc')).position") == "sticky"
    page.click("#figures > summary")
    assert not page.evaluate("document.getElementById('figures').open")
    page.click("#figures > summary")
    # Every movie shows its first frame before it plays, and its controls sit below it.
    posters = page.eval_on_selector_all("video", "els => els.map(e => e.poster)")
    assert len(posters) == 5 and all(posters)
    assert page.evaluate("""() => [...document.querySelectorAll('figure.movie')].every(f => {
        const v = f.querySelector('video').getBoundingClientRect();
        return !f.querySelector('video').controls
            && f.querySelector('.controls').getBoundingClientRect().top >= v.bottom; })""")
    page.eval_on_selector_all("video", "els => els.forEach(e => e.load())")
    page.wait_for_function(
        "() => [...document.querySelectorAll('video')].every("
        "v => v.readyState >= 1 && v.videoWidth > 0)",
        timeout=20000,
    )
    assert page.eval_on_selector_all("video", "els => els.length") == 5
    rows = page.eval_on_selector_all("table td", "els => els.map(e => e.textContent)")
    assert "retrieve" in " ".join(rows) and "total" in rows
    assert failed == []  # before leaving: navigation aborts the videos' pending range requests
    with page.expect_navigation():
        page.click("#explorer-link")
    page.wait_for_function(READY)
    assert page.evaluate("explorer.selfCheck")["ok"]
    assert watched.errors == []
    assert all(url.startswith("file://") for url in watched.requests)
    close(watched)


def test_rerunning_resumes_the_same_run_and_refuses_a_different_one(made):
    out, _ = made
    again = reproduce(out)
    assert again.returncode == 0, again.stderr[-2000:]
    other = reproduce(out, "--preset", "paper-2d-2layer")
    assert other.returncode == 2
    lines = [line for line in other.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--force" in lines[0] and "Traceback" not in other.stderr


def test_the_report_opens_with_one_measure_per_step_each_at_its_explorer_panel():
    from flatformer.publish.report import explorer_view, step_headlines

    rows = [
        {"step": s, "measure": m, "shown": v}
        for s, m, v in [
            ("1 encode", "separable", "3 of 3"),
            ("1 encode", "ladder", "0.9"),
            ("2 detect", "queries (head 1.0)", "yes"),
            ("3 retrieve", "rows (head 1.0)", "99%"),
            ("3 retrieve", "later", "0.8"),
            ("4 produce", "cos (head 1.1)", "0.99"),
            ("5 nudge", "z lands", "100%"),
            ("5 nudge", "without", "10%"),
        ]
    ]
    first = step_headlines(rows)
    assert [r["measure"] for r in first] == [
        "separable",
        "queries (head 1.0)",
        "rows (head 1.0)",
        "cos (head 1.1)",
        "z lands",
    ]
    # Attention steps go to the layer of the head the measure names; the nudge to the last.
    assert [explorer_view(r["step"], r["measure"], 3) for r in first] == [
        "embed",
        "attend-1",
        "attend-1",
        "attend-1",
        "think-2",
    ]
    assert explorer_view("6 unknown", "", 1) == "" and explorer_view("", "", 1) == ""
