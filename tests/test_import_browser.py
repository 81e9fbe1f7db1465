"""The explorer's self-check in Chromium on an imported nanoGPT character model (b_O, the exact
GELU, a final LayerNorm: the page recomputes them and agrees with the Python engine).

How fast such pages open is measured by bench/explorer_speed.py, not here: a test shares the
machine with the rest of the suite."""

import pytest

from flatformer.explorer import render_html
from flatformer.importers.run import read_source, write_run
from test_explorer_browser import visit
from test_import_nanogpt import write_source


@pytest.mark.parametrize("with_text", [False, True])
def test_the_self_check_passes_on_an_imported_nanogpt_character_model(
    chromium, tmp_path, with_text
):
    """With a held-out text (--corpus) the page also carries its windows and demo."""
    write_source(tmp_path)
    (tmp_path / "val.txt").write_text("abc defghi\nabcabc ghi\n" * 4)
    corpus = tmp_path / "val.txt" if with_text else None
    run = write_run(
        *read_source(tmp_path / "ckpt.pt", None, tmp_path / "meta.pkl", corpus=corpus),
        tmp_path / "run",
    )
    page = tmp_path / "page.html"
    page.write_text(render_html(run), encoding="utf-8")
    with visit(chromium, page) as p:
        check = p.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9


def write_big_float32_source(folder):
    """A float32 nanoGPT character model of just under 1M parameters (flatformer's count, the
    tied unembedding counted apart), its LayerNorms moved off 1 and 0 so they matter."""
    import pickle

    import torch

    from test_import_nanogpt import GPT

    torch.manual_seed(0)
    chars = "abcdefghi \n"
    args = dict(n_layer=5, n_head=4, n_embd=128, block_size=32, vocab_size=len(chars), bias=True)
    gpt = GPT(**args).to(torch.float32)
    with torch.no_grad():
        for name, p in gpt.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    torch.save(
        {"model_args": {**args, "dropout": 0.0}, "model": gpt.state_dict()}, folder / "ckpt.pt"
    )
    itos = dict(enumerate(chars))
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(
            {"vocab_size": len(chars), "itos": itos, "stoi": {c: i for i, c in itos.items()}}, f
        )


def test_a_float32_model_of_1m_parameters_opens_before_its_circuits_are_drawn(
    chromium, tmp_path, monkeypatch
):
    from flatformer.store.runs import load_run

    write_big_float32_source(tmp_path)
    run = write_run(
        *read_source(tmp_path / "ckpt.pt", None, tmp_path / "meta.pkl"), tmp_path / "run"
    )
    n_params = load_run(run).cfg.n_params
    assert 900_000 < n_params <= 1_000_000
    page = tmp_path / "page.html"
    page.write_text(render_html(run), encoding="utf-8")
    with visit(chromium, page, ready="() => window.explorer && window.explorer.openedAt") as p:
        # Open, with head cards still to draw: the last one, scrolled into view, is drawn
        # before the page gets to it when idle.
        assert p.evaluate("document.querySelectorAll('.head-card.drawing').length") > 0
        p.evaluate("document.querySelector('.head-card[data-head=\"4.3\"]').scrollIntoView()")
        p.wait_for_function(
            "() => !document.querySelector('.head-card[data-head=\"4.3\"].drawing')",
            timeout=120_000,
        )
        assert not p.evaluate("explorer.ready")
        p.wait_for_function(
            "() => document.documentElement.dataset.ready === 'true'", timeout=300_000
        )
        check = p.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9
        checked = p.evaluate("explorer.checkedAt") / 1000
        # Open: the self-check done and every panel in the first viewport drawn; the panels
        # below it (the 20 heads' QK/OV circuits above all) are drawn later, as they near the
        # viewport or when the page is idle, and all of them are drawn by the time it is ready.
        opened = p.evaluate("explorer.openedAt") / 1000
        ready = p.evaluate("explorer.readyAt") / 1000
        first = p.evaluate("explorer.firstViewport")
        assert {"header", "embed"} <= set(first) and "circuits" not in first
        drawn = p.evaluate("document.querySelectorAll('.head-card .sv[data-values]').length")
        assert drawn == 2 * 5 * 4
        assert p.evaluate("document.querySelectorAll('.drawing').length") == 0
        assert checked < opened < ready
    # The same page with the weights in float64: the float32 one is about half its size.
    monkeypatch.setattr("flatformer.explorer.export.fits_float32", lambda weights: False)
    wide = render_html(run)
    assert 0.45 < page.stat().st_size / len(wide.encode()) < 0.55
    print(f"{n_params} parameters: checked in {checked:.2f} s, open in {opened:.2f} s, "
          f"every panel drawn in {ready:.2f} s, "
          f"{page.stat().st_size} bytes against {len(wide.encode())} in float64")  # fmt: skip
