"""The explorer as a picture: a full-page capture (and so a print) shows every panel drawn, not
the empty cards of panels the browser skipped because they were off screen."""

import io

import numpy as np
from PIL import Image

from browser import close, open_page
from flatformer.explorer import render_html

READY = "() => document.documentElement.dataset.ready === 'true'"
PANELS = """() => [...document.querySelectorAll('.panel')].map((p) => {
  const r = p.getBoundingClientRect();
  return [p.id, r.left + scrollX, r.top + scrollY, r.width, r.height];
})"""


def test_a_full_page_capture_shows_every_panel(chromium, paper_run, tmp_path):
    path = tmp_path / "page.html"
    path.write_text(render_html(paper_run), encoding="utf-8")
    watched = open_page(chromium, path.as_uri(), READY, viewport=(1200, 800))
    try:
        page = watched.page
        assert "1 head, d_head 2" in page.inner_text("header")
        image = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("L"))
        panels = page.evaluate(PANELS)
        assert len(panels) >= 8 and panels[-1][2] > 3 * 800  # most panels start off screen
        for name, x, y, w, h in panels:
            card = image[int(y) + 2 : int(y + h) - 2, int(x) + 2 : int(x + w) - 2]
            background = np.bincount(card.ravel()).argmax()
            inked = np.mean(np.abs(card.astype(int) - background) > 40)
            assert inked > 0.01, f"panel {name!r} is blank in the capture ({inked:.2%} inked)"
        assert watched.errors == []
    finally:
        close(watched)
