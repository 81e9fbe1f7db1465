"""The atlas's phase-diagram page in headless Chromium: offline, a click on a cell lists its
runs, a run's link opens its explorer page, and every string is shown as text."""

import pytest

from browser import close, open_page
from clitools import assert_one_line_error, cli_here
from flatformer.atlas import phase_diagram, read_atlas
from flatformer.explorer.atlas_page import atlas_html
from test_atlas import ATLAS

EXPLORER_READY = (
    "() => document.documentElement.dataset.ready === 'true' || "
    "!!document.querySelector('.banner.fail')"
)
EVIL = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A tiny atlas made by the command (its explorer pages with it)."""
    folder = tmp_path_factory.mktemp("atlas")
    (folder / "tiny.toml").write_text(ATLAS)
    result = cli_here(
        "atlas",
        folder / "tiny.toml",
        "--out",
        folder / "out",
        "--workers",
        "1",
        "--set",
        "data_seed=2",
    )
    assert result.returncode == 0, result.stderr
    assert "6 runs in 3 jobs (3 trained now, 0 finished before)" in " ".join(result.stdout.split())
    return folder / "out"


def visit(chromium, path, fragment=""):
    watched = open_page(chromium, path.as_uri() + fragment)
    return watched


def test_the_page_lists_a_cells_runs_and_opens_their_explorer(chromium, made):
    rows = read_atlas(made / "results.csv")
    assert {r["data_seed"] for r in rows} == {2}  # the --set reached every job
    assert (made / "atlas.png").stat().st_size > 10_000
    watched = visit(chromium, made / "atlas.html")
    page = watched.page
    try:
        # Oracle: the bins of tenths the runs' attn_coeff fall in, counted here.
        bins = {}
        for r in rows:
            bins.setdefault(min(int(r["attn_coeff"] * 10), 9), []).append(r)
        cells = page.locator("td.cell a")
        assert cells.count() == len(bins)
        assert page.locator("section.runs").first.is_hidden()
        first = min(bins)
        assert f"n={len(bins[first])}" in cells.first.inner_text()
        cells.first.click()
        section = page.locator("section.runs:target")
        assert section.is_visible()
        links = section.locator("a")
        hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
        assert sorted(hrefs) == sorted(
            f"{r['job']}/seed_{r['seed']}/explorer.html" for r in bins[first]
        )
        links.first.click()
        page.wait_for_function(EXPLORER_READY)
        assert page.url.endswith("/explorer.html")
        assert page.locator(".banner.fail").count() == 0
        assert watched.dialogs == []
        assert all(url.startswith("file://") for url in watched.requests)
    finally:
        close(watched)


def test_every_string_is_shown_as_text(chromium, tmp_path):
    rows = [
        {"job": EVIL, "seed": 0, "attn_coeff": 0.2, "d_model": 32, "mechanism": "pizza"},
        {"job": "a&b\"c'", "seed": 1, "attn_coeff": 0.9, "d_model": 32, "mechanism": "clock"},
    ]
    path = tmp_path / "atlas.html"
    path.write_text(atlas_html(phase_diagram(rows, y="d_model", bins=5), EVIL), encoding="utf-8")
    watched = visit(chromium, path)
    page = watched.page
    try:
        assert page.title() == f"flatformer atlas · {EVIL}"
        assert page.locator("img").count() == 0
        page.locator("td.cell a").first.click()
        assert EVIL in page.locator("section.runs:target").inner_text()
        assert watched.dialogs == [] and watched.errors == []
        assert {u.split("#")[0] for u in watched.requests} == {path.as_uri()}
    finally:
        close(watched)
    # Without explorer pages the runs are named, not linked.
    path.write_text(atlas_html(phase_diagram(rows, bins=5), "t", None), encoding="utf-8")
    watched = visit(chromium, path)
    try:
        watched.page.locator("td.cell a").first.click()
        section = watched.page.locator("section.runs:target")
        assert section.locator("a").count() == 0 and "seed 0" in section.inner_text()
        assert "flatformer explore" in watched.page.locator("p.note").inner_text()
    finally:
        close(watched)


@pytest.mark.parametrize(
    "text, words",
    [
        (
            'tasks = ["modular-addition"]\nrecipes = ["grokking"]\nseeds = "0"\n[draw]\nn_runs = 0\n'
            "lr = {uniform = [0, 1]}\n",
            ["n_runs"],
        ),
        (
            'tasks = ["modular-addition"]\nrecipes = ["grokking"]\nseeds = "0"\nwhat = 1\n',
            ["unknown key 'what'"],
        ),
        (
            'tasks = ["modular-addition"]\nrecipes = ["grokking"]\nseeds = "0"\n[draw]\nn_runs = 2\n'
            "attn_coef = {uniform = [0, 1]}\n",
            ["attn_coef"],
        ),
    ],
)
def test_bad_atlas_files_get_one_line(tmp_path, text, words):
    (tmp_path / "a.toml").write_text(text)
    result = cli_here("atlas", tmp_path / "a.toml", "--out", tmp_path / "out")
    assert_one_line_error(result, *words)
    assert not (tmp_path / "out").exists()
