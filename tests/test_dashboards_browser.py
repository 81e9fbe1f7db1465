"""The feature dashboards page in real headless Chromium: it opens offline and quiet, its
self-check recomputes every activation shown, a latent's contexts, histogram, logit effect and
decoder direction are drawn from Python's numbers, a hostile token name stays text, and a page
whose numbers were changed says so in red.

Dictionaries trained for a few hundred steps on a random plane model's activations (a TopK SAE,
a JumpReLU SAE and a ReLU transcoder), so the file stays fast.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from browser import close, open_page
from conftest import CONFIGS, random_model
from flatformer.dictionary import Recipe, train_stack
from flatformer.dictionary.dashboards import BINS, dashboards
from flatformer.dictionary.saelens import saelens_cfg
from flatformer.explorer.dashboards_page import dashboards_html
from flatformer.readout.labels import short

READY = "() => document.documentElement.dataset.ready === 'true' || !!document.querySelector('.banner.fail')"
EVIL = "<img src=x onerror=alert(1)>"
CLOSE = "</script><b>x</b>"  # would end the data's script element if it went in raw
HOOK, MID, MLP_OUT = "blocks.0.hook_resid_post", "blocks.0.hook_resid_mid", "blocks.0.hook_mlp_out"


@pytest.fixture(scope="module")
def data():
    model = random_model(CONFIGS["paper-2d"])
    tokens = np.random.default_rng(0).integers(0, 12, (200, 8))
    tokens[:, 3] = 0  # the hostile token at every window's position 3
    _, cache = model.run_with_cache(tokens)
    x, mid, out = (cache[h].reshape(-1, 2) for h in (HOOK, MID, MLP_OUT))
    recipe = Recipe(steps=200, batch=256)
    members = []
    for kind, k, inputs, target in (
        ("topk", 1, x, None),
        ("jumprelu", 0, x, None),
        ("relu", 0, mid, out),
    ):
        stack, _ = train_stack(kind, inputs, target, [6], [k or 1], [0.1], recipe)
        weights = stack.member(0)
        transcoder = target is not None
        cfg = saelens_cfg(
            kind, weights, MID if transcoder else HOOK, MLP_OUT if transcoder else None, k=k
        )
        name = "transcoder" if transcoder else kind
        members.append((name, cfg, weights))
    vocab = [EVIL, CLOSE] + [str(i) for i in range(2, 12)]
    truth = {"north": np.array([0.0, 1.0]), EVIL: np.array([1.0, 0.0])}
    return dashboards(model, members, tokens, vocab, vocab, EVIL, truth, {"topk": {"l0": 1.0}})


@pytest.fixture(scope="module")
def page_file(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("dash") / "dashboards.html"
    path.write_text(dashboards_html(data), encoding="utf-8")
    return path


@contextlib.contextmanager
def visit(chromium, path, fragment=""):
    watched = open_page(chromium, path.as_uri() + fragment, READY)
    try:
        yield watched.page
        assert watched.errors == []
        assert watched.dialogs == []  # no alert(1) from a token name
        assert {url.split("#")[0] for url in watched.requests} == {path.as_uri()}
    finally:
        close(watched)


def firing_latent(d):
    return max(d["latents"], key=lambda lat: (len(lat["contexts"]), lat["density"]))


def test_the_page_opens_offline_and_its_self_check_recomputes_every_activation(
    chromium, page_file, data
):
    shown = sum(len(c["acts"]) for d in data["dictionaries"] for lat in d["latents"]
                for c in lat["contexts"])  # fmt: skip
    with visit(chromium, page_file) as page:
        check = page.evaluate("dashboards.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9 and check["activations"] == shown > 0
        assert page.get_attribute("#selfcheck", "class") == "banner ok"
        assert page.locator("img").count() == 0
        assert EVIL in page.text_content(".run-name")  # the title, as text
        options = page.locator("#dictionary option").all_text_contents()
        assert options == ["topk", "jumprelu", "transcoder"]


def test_clicking_a_latent_shows_its_contexts_histogram_logits_and_direction(
    chromium, page_file, data
):
    d = data["dictionaries"][1]
    lat = firing_latent(d)
    with visit(chromium, page_file, f"#dict={d['name']}") as page:
        page.click(f"#latents [data-latent='{lat['index']}']")
        assert page.text_content("#latent h2") == f"Latent {lat['index']}"
        assert f"latent={lat['index']}" in page.evaluate("location.hash")
        contexts = page.locator("#latent .context")
        assert contexts.count() == len(lat["contexts"]) > 0
        for n, c in enumerate(lat["contexts"]):
            firing = contexts.nth(n).locator(".ctx-tok.firing")
            assert firing.count() == 1
            assert firing.get_attribute("data-pos") == str(c["pos"])
            assert float(firing.get_attribute("data-act")) == c["acts"][c["pos"]]
            tokens = contexts.nth(n).locator(".ctx-tok")
            assert tokens.count() == len(data["windows"][c["window"]])
        # the top context's firing token is the latent's largest activation, shaded darkest
        top = contexts.nth(0).locator(".ctx-tok.firing")
        assert float(top.get_attribute("data-act")) == lat["max"]
        off = contexts.nth(0).locator(".ctx-tok[data-act='0']")
        if off.count():
            assert top.evaluate("e => e.style.background") != off.first.evaluate(
                "e => e.style.background"
            )
        chips = page.locator("#latent .fires-on .chip")
        assert chips.count() == len(lat["tokens"]) + len(lat["positions"])
        assert chips.first.get_attribute("title").startswith(lat["tokens"][0][0] + ":")
        bars = page.locator("#latent svg.histogram rect")
        assert bars.count() == BINS
        counts = [int(bars.nth(i).get_attribute("data-count")) for i in range(BINS)]
        assert counts == lat["histogram"]["counts"]
        rows = page.locator("#latent .logit .bar-label").all_text_contents()
        want = lat["logits"]["boosted"] + lat["logits"]["suppressed"]
        assert rows == [short(n) for n, _ in want]  # names cut as every label is
        assert page.locator("#latent .plane-svg .decoder line").count() == 1
        assert page.locator("#latent .plane-svg .truth line").count() == 1
        assert lat["truth"]["name"] in page.text_content("#latent .truth-note")


def test_sorting_orders_the_latents_as_python_measured_them(chromium, page_file, data):
    d = data["dictionaries"][0]
    with visit(chromium, page_file) as page:
        for key in ("max", "density"):
            page.click(f"#sort button[data-sort='{key}']")
            shown = page.eval_on_selector_all(
                "#latents .latent-row", "rows => rows.map(r => Number(r.dataset.latent))"
            )
            want = sorted(d["latents"], key=lambda lat: (-lat[key], lat["index"]))
            assert shown == [lat["index"] for lat in want]
        # the arrow keys move through the list in its order
        page.click(f"#latents [data-latent='{shown[0]}']")
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowDown")
        assert page.text_content("#latent h2") == f"Latent {shown[2]}"
        page.keyboard.press("ArrowUp")
        assert page.evaluate("dashboards.state.latent") == shown[1]


def test_a_hostile_token_name_is_shown_as_text(chromium, page_file, data):
    d = data["dictionaries"][0]
    lat = next(lat for lat in d["latents"] if lat["contexts"])
    with visit(chromium, page_file, f"#dict=topk&latent={lat['index']}") as page:
        evil = page.locator("#latent .ctx-tok[data-pos='3']").first
        assert evil.get_attribute("title").startswith(EVIL)
        assert evil.text_content() == short(EVIL) != EVIL
        assert page.locator("img").count() == 0
        assert (
            page.evaluate("document.querySelectorAll('[onerror], b:not(.truth-note b)').length")
            == 0
        )
        titles = page.eval_on_selector_all("#latent .ctx-tok", "ts => ts.map(t => t.title)")
        assert any(t.startswith(CLOSE + " at position") for t in titles)


def test_the_transcoders_logit_effect_and_a_changed_number_fails_the_self_check(
    chromium, data, tmp_path
):
    bad = json.loads(json.dumps(data))
    lat = firing_latent(bad["dictionaries"][2])
    lat["contexts"][0]["acts"][lat["contexts"][0]["pos"]] += 1e-3
    path = tmp_path / "bad.html"
    path.write_text(dashboards_html(bad), encoding="utf-8")
    with visit(chromium, path, f"#dict=transcoder&latent={lat['index']}") as page:
        banner = page.text_content(".banner.fail")
        assert "SELF-CHECK FAILED" in banner and f"transcoder, latent {lat['index']}" in banner
        logits = lat["logits"]["boosted"] + lat["logits"]["suppressed"]
        assert page.locator("#latent .logit").count() == len(logits) > 0
