"""`flatformer figures` as a user runs it: files on disk, formats, skips and one-line errors."""

import subprocess
import sys

import pytest

from flatformer.figures import FIGURES
from flatformer.store.runs import load_run


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "flatformer", "figures", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_all_figures_in_png_and_pdf_for_the_paper_run(paper_run):
    result = cli(paper_run, "--format", "png,pdf")
    assert result.returncode == 0, result.stderr
    last = load_run(paper_run).steps[-1]
    folder = paper_run / "figures" / f"step_{last:06d}"
    for name in FIGURES:
        png, pdf = folder / f"{name}.png", folder / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert pdf.read_bytes()[:5] == b"%PDF-", name
        assert png.stat().st_size > 10_000
    assert len(list(folder.iterdir())) == 2 * len(FIGURES)  # no temporary files left
    assert f"{len(FIGURES)} figures (png, pdf) for step {last}" in result.stdout


def test_svg_at_a_chosen_step_into_a_chosen_folder(paper_run, tmp_path):
    out = tmp_path / "figs"
    result = cli(
        paper_run,
        "--step",
        100,
        "--format",
        "svg",
        "--out",
        out,
        "--only",
        "fig10,fig15",
        "--sequence",
        "2 + 8 +",
        "--jobs",
        1,
    )
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["fig10_landscape_summary.svg", "fig15_trace_nudge.svg"]
    svg = (out / "fig15_trace_nudge.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "step 100" in svg and "+₃" in svg
    assert "2 + 8 +" in result.stdout


def test_simulator_run_draws_pca_figures_and_names_what_it_skips(simulator_run, tmp_path):
    result = cli(simulator_run, "--out", tmp_path, "--only", "fig05,fig09,fig13,supp_qk_full")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig05_embeddings.png",
        "fig13_trace_attention.png",
        "supp_qk_full.png",
    ]
    assert (
        "skipped fig09_output_landscape: the output landscape needs d_model == 2" in result.stderr
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--step", "150"], "no checkpoint at step 150"),
        (["--sequence", "4 1 x +"], "token 'x' is not in the vocabulary"),
        (["--sequence", "1 2 3 4 5 6 7 8 9"], "exceed the context of 8"),
        (["--sequence", " "], "--sequence is empty"),
        (["--format", "png,jpg"], "--format takes a comma list of png, pdf, svg"),
        (["--only", "fig99"], "no figure named 'fig99'"),
    ],
)
def test_bad_input_is_one_line_error(paper_run, tmp_path, args, message):
    result = cli(paper_run, "--out", tmp_path / "never", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flatformer: error:"), result.stderr
    assert message in lines[0]
    assert not (tmp_path / "never").exists()


def test_not_a_run_folder(tmp_path):
    result = cli(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"flatformer: error: {tmp_path} is not a flatformer run: no config.json"
    ]
