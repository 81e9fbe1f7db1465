"""Every figure and movie of a llama-like, a neox-like (rotary and parallel) and a SoLU run is
written, or skipped with a reason (the runs: conftest's `plane_run`)."""

from flatformer.figures import figures_for
from flatformer.publish.pipeline import draw_suite, write_movies
from flatformer.store.runs import load_run


def test_every_figure_is_drawn_or_skipped_with_a_reason(plane_run, tmp_path):
    kind, path = plane_run
    names = list(figures_for(load_run(path).task))
    _, _, written, skipped = draw_suite(path, out_dir=tmp_path, jobs=1)
    reasons = {m.split()[1].rstrip(":"): m for m in skipped}
    assert {p.stem for p in written} | set(reasons) == set(names)
    assert not {p.stem for p in written} & set(reasons)
    if kind == "neox":  # a parallel block has no output network of the stream after attention
        assert set(reasons) >= {"fig09_output_landscape", "fig15_trace_nudge"}
        assert all("parallel" in m for m in reasons.values())
    else:
        assert not reasons, reasons


def test_every_movie_is_written_or_skipped_with_a_reason(plane_run, tmp_path):
    kind, path = plane_run
    written, skipped = write_movies(path, formats="gif", workers=1, out_dir=tmp_path)
    assert set(written) | set(skipped) == {
        "mov1_embeddings", "mov2_landscape", "mov3_qkv", "mov4_qk_space", "mov5_qk_attention"
    }  # fmt: skip
    assert all(p.exists() for paths in written.values() for p in paths)
    if kind == "neox":
        assert list(skipped) == ["mov2_landscape"] and "parallel" in skipped["mov2_landscape"]
    else:
        assert not skipped
