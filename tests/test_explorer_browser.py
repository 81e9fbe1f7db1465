"""The explorer page in real headless Chromium: its numbers against the Python engine.

One browser for the session (tests/browser.py); every page visit asserts that the page made
no request beyond its own file, logged no console error and opened no dialog.
"""

import contextlib
import math

import numpy as np
import pytest

from browser import close, open_page
from flatformer.config import preset
from flatformer.explorer import render_html
from flatformer.explorer.export import export_run, pack, unpack
from flatformer.explorer.page import page_html
from conftest import CONFIGS
from flatformer.engine.model import hook_names, init_params
from flatformer.readout import fit_plane
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer

# Functions, not expressions: the page's Content-Security-Policy forbids eval of strings.
READY = "() => document.documentElement.dataset.ready === 'true' || !!document.querySelector('.banner.fail')"
EVIL = "<img src=x onerror=alert(1)>"
RUNS = ["paper_run", "simulator_run", "two_layer_run"]


@pytest.fixture(scope="session")
def page_of(tmp_path_factory):
    """The explorer file of a run folder, rendered once per session."""
    folder, made = tmp_path_factory.mktemp("pages"), {}

    def make(run_dir):
        if run_dir not in made:
            made[run_dir] = folder / f"page{len(made)}.html"
            made[run_dir].write_text(render_html(run_dir), encoding="utf-8")
        return made[run_dir]

    return make


@contextlib.contextmanager
def visit(chromium, path, fragment="", ready=READY):
    """The page at file `path` (plus a URL fragment), checked for quiet offline behaviour."""
    watched = open_page(chromium, path.as_uri() + fragment, ready)
    try:
        yield watched.page
        assert watched.errors == []
        assert watched.dialogs == []
        assert {url.split("#")[0] for url in watched.requests} == {path.as_uri()}
    finally:
        close(watched)


def state(page):
    return page.evaluate("explorer.state")


def log_softmax(x):
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def kl(original, changed):
    """KL(original || changed) in nats, the page's and the analysis's definition."""
    a, b = log_softmax(original), log_softmax(changed)
    return float((np.exp(a) * (a - b)).sum())


def zero_head(h):
    def hook(z, name):
        z = z.copy()
        z[:, :, h] = 0.0
        return z

    return hook


@pytest.mark.parametrize("fixture", RUNS)
def test_self_check_passes_and_every_panel_shows_its_hooks(chromium, page_of, request, fixture):
    run = load_run(request.getfixturevalue(fixture))
    cfg = run.cfg
    with visit(chromium, page_of(run.path)) as page:
        check = page.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9
        assert check["prompts"] >= 9 and check["tokens"] == cfg.d_vocab
        assert check["places"] == cfg.n_ctx
        banner = page.locator("#selfcheck")
        assert banner.get_attribute("class") == "banner ok" and "passed" in banner.text_content()
        panels = page.eval_on_selector_all("section.panel", "els => els.map(e => e.id)")
        layers = [p for l in range(cfg.n_layers) for p in (f"attend-{l}", f"think-{l}")]
        assert panels == [
            "input",
            "embed",
            *layers,
            "readout",
            "knobs",
            "circuits",
            "edges",
            "lens",
        ]
        shown = set(page.eval_on_selector_all("code.hook", "els => els.map(e => e.textContent)"))
        # Every activation is on the page except LayerNorm scales and the later layers'
        # resid_pre (the same numbers as the previous layer's resid_post, shown there).
        wanted = {
            n
            for n in hook_names(cfg)
            if "hook_scale" not in n
            and not (n.endswith("hook_resid_pre") and not n.startswith("blocks.0."))
        }
        assert wanted <= shown, wanted - shown
        # Circuits: the singular values of every head's QK and OV against NumPy.
        weights = run.weights()
        for layer in range(cfg.n_layers):
            b = f"blocks.{layer}.attn."
            for h in range(cfg.n_heads):
                qk = weights[b + "W_Q"][h] @ weights[b + "W_K"][h].T
                ov = (
                    weights[b + "W_V"][h] @ weights[b + "W_O"][h]
                    if cfg.attn_out
                    else weights[b + "W_V"][h]
                )
                for kind, matrix in (("QK", qk), ("OV", ov)):
                    box = page.locator(
                        f'#circuits .head-card[data-head="{layer}.{h}"] .sv[data-kind="{kind}"]'
                    )
                    values = [float(v) for v in box.get_attribute("data-values").split(",")]
                    s = np.linalg.svd(matrix, compute_uv=False)
                    np.testing.assert_allclose(values, s, atol=1e-12 * s[0])
                    top_k = float(box.get_attribute("data-top-k"))
                    k = min(3, cfg.d_head)
                    assert abs(top_k - (s[:k] ** 2).sum() / (s**2).sum()) < 1e-12
        # Logit lens: the top token of every stage and position, from the Python cache.
        tokens = page.evaluate("explorer.state.seq")
        _, cache = run.model().run_with_cache(tokens)
        stages = ["blocks.0.hook_resid_pre"] + [
            f"blocks.{l}.hook_{s}" for l in range(cfg.n_layers) for s in ("resid_mid", "resid_post")
        ]
        top = page.eval_on_selector_all(
            "#lens-grid .lens-cell", "els => els.map(e => +e.dataset.top)"
        )
        expected = []
        for hook in stages:
            logits = cache[hook][0] @ weights["unembed.W_U"]
            if cfg.unembed_bias:
                logits = logits + weights["unembed.b_U"]
            expected += logits.argmax(-1).tolist()
        assert top == expected


# Every activation of the page's forward pass, as the page's cache holds it (TransformerLens
# shapes without the batch axis), against the engine, for every configuration the tests know,
# with random weights and LayerNorm gains and biases moved off 1 and 0.
FORWARD = """([cfg, flat, tokens, knobs]) => {
  const model = {cfg, w: FlatModel.unpack(cfg, new Float64Array(flat))};
  const {logits, cache} = FlatModel.forward(model, tokens, knobs);
  return {logits, cache};
}"""


def random_tensors(cfg, rng):
    tensors = init_params(cfg, [rng]).seed(0)
    for key in tensors:
        if "ln" in key or key.endswith("b_U") or ".b_" in key:
            tensors[key] = tensors[key] + 0.3 * rng.standard_normal(tensors[key].shape)
    return tensors


def test_the_js_forward_pass_equals_the_engine_everywhere(chromium, paper_run, page_of):
    rng = np.random.default_rng(7)
    with visit(chromium, page_of(load_run(paper_run).path)) as page:
        for name, cfg in CONFIGS.items():
            tensors = random_tensors(cfg, rng)
            model = Transformer(cfg, tensors)
            flat = np.concatenate([tensors[k].ravel() for k in cfg.param_shapes()]).tolist()
            last = cfg.n_layers - 1
            scale = {
                f"blocks.{l}.attn.hook_attn_scores": (
                    lambda x, n: np.where(np.isfinite(x), 1.7 * x, x)
                )
                for l in range(cfg.n_layers)
            }
            knobs = {"headsOff": [f"{last}.0"], "beta": 1.7, "posOff": True}
            hooks = {
                f"blocks.{last}.attn.hook_z": zero_head(0),
                "hook_pos_embed": lambda x, n: 0 * x,
                **scale,
            }
            if not cfg.attn_only:
                knobs["mlpOff"] = [0]
                hooks["blocks.0.hook_mlp_out"] = lambda x, n: 0 * x
            knob_sets = [({}, {}), (knobs, hooks)]
            for T in (cfg.n_ctx, 3):
                tokens = rng.integers(0, cfg.d_vocab, T).tolist()
                for js_knobs, hooks in knob_sets:
                    got = page.evaluate(FORWARD, [cfg.to_dict(), flat, tokens, js_knobs])
                    logits, cache = model.run_with_cache(tokens, hooks=hooks)
                    np.testing.assert_allclose(
                        got["logits"], logits[0], atol=1e-10, rtol=0, err_msg=name
                    )
                    for hook in hook_names(cfg):
                        np.testing.assert_allclose(
                            np.array(got["cache"][hook], dtype=float),
                            cache[hook][0],
                            atol=1e-10,
                            rtol=0,
                            err_msg=f"{name} {hook} {js_knobs}",
                        )


def test_the_page_draws_in_the_planes_python_fits(chromium, paper_run, page_of):
    rng = np.random.default_rng(3)
    clouds = [
        rng.standard_normal((24, d)) * [3.0, 1.5, 0.5, 0.2, 0.1][:d] + 0.7 for d in (1, 2, 3, 5)
    ]
    with visit(chromium, page_of(load_run(paper_run).path)) as page:
        planes = page.evaluate(
            "(clouds) => clouds.map((c) => FlatMeasures.pca2(c))", [c.tolist() for c in clouds]
        )
    for cloud, got in zip(clouds, planes):
        plane = fit_plane(cloud)
        assert got["exact"] == plane.is_identity
        np.testing.assert_allclose(got["mean"], plane.mean, atol=1e-9, rtol=0)
        np.testing.assert_allclose(got["axes"], plane.axes, atol=1e-9, rtol=0)


def test_a_failed_self_check_is_a_red_banner(chromium, paper_run, tmp_path):
    data = export_run(paper_run, max_checkpoints=2)
    logits = unpack(data["reference"]["logits"]).copy()
    logits[17] += 1e-6  # one reference number off by a millionth
    data["reference"]["logits"] = pack(logits)
    path = tmp_path / "broken.html"
    path.write_text(page_html(data), encoding="utf-8")
    with visit(chromium, path) as page:
        banner = page.locator("#selfcheck")
        assert banner.get_attribute("class") == "banner fail"
        assert "SELF-CHECK FAILED" in banner.text_content()
        assert banner.is_visible()
        assert not page.evaluate("explorer.selfCheck.ok")


@pytest.mark.parametrize(
    "fixture, head, q, k", [("paper_run", 0, 7, 4), ("simulator_run", 1, 6, 2)]
)
def test_a_clicked_attention_cell_shows_the_python_cache(
    chromium, page_of, request, fixture, head, q, k
):
    run = load_run(request.getfixturevalue(fixture))
    with visit(chromium, page_of(run.path)) as page:
        canvas = page.locator(
            f'#attend-0 .head-card[data-head="0.{head}"] '
            f'figure[data-hook="blocks.0.attn.hook_pattern"] canvas'
        )
        pitch = int(canvas.get_attribute("data-cell")) + int(canvas.get_attribute("data-gap"))
        canvas.click(position={"x": k * pitch + pitch / 2, "y": q * pitch + pitch / 2})
        page.wait_for_function("() => location.hash.includes('cell=')")
        assert state(page)["cell"] == {"l": 0, "h": head, "q": q, "k": k}
        qk = page.evaluate("explorer.geometry().qk")  # the Q/K plane follows the query
        assert (qk["head"], qk["query"]) == (head, q)
        assert qk["masked"] == [j > q for j in range(len(qk["keys"]))]
        assert f"cell=0.{head}.{q}.{k}" in page.evaluate("location.hash")
        shown = dict(
            page.eval_on_selector_all(
                "#arith-0 [data-key]", "els => els.map(e => [e.dataset.key, +e.dataset.value])"
            )
        )
        tokens = state(page)["seq"]
        canvas.press("ArrowLeft")  # the keyboard walks the map too
        assert state(page)["cell"] == {"l": 0, "h": head, "q": q, "k": k - 1}
    _, cache = run.model().run_with_cache(tokens)
    qv = cache["blocks.0.attn.hook_q"][0, q, head]
    kv = cache["blocks.0.attn.hook_k"][0, k, head]
    scores = cache["blocks.0.attn.hook_attn_scores"][0, head, q]
    pattern = cache["blocks.0.attn.hook_pattern"][0, head, q]
    d_head = run.cfg.d_head
    assert sum(key.startswith("prod.") for key in shown) == d_head
    for i in range(d_head):
        assert shown[f"q.{i}"] == pytest.approx(qv[i], abs=1e-12)
        assert shown[f"k.{i}"] == pytest.approx(kv[i], abs=1e-12)
        assert shown[f"prod.{i}"] == pytest.approx(qv[i] * kv[i], abs=1e-12)
    assert shown["dot"] == pytest.approx(qv @ kv, abs=1e-12)
    assert shown["sqrt"] == math.sqrt(d_head)
    assert shown["score"] == pytest.approx(scores[k], abs=1e-12)
    for j in range(len(tokens)):
        assert shown[f"row.{j}.weight"] == pytest.approx(pattern[j], abs=1e-12)
        if j <= q:
            assert shown[f"row.{j}.score"] == pytest.approx(scores[j], abs=1e-12)
    assert shown["sum"] == pytest.approx(
        np.exp(scores[: q + 1] - scores[: q + 1].max()).sum(), rel=1e-12
    )


@pytest.mark.parametrize(
    "fixture, layer, head", [("paper_run", 0, 0), ("simulator_run", 0, 1), ("two_layer_run", 1, 0)]
)
def test_switching_a_head_off_shows_the_python_kl(chromium, page_of, request, fixture, layer, head):
    run = load_run(request.getfixturevalue(fixture))
    with visit(chromium, page_of(run.path)) as page:
        assert float(page.get_attribute("#kl", "data-value")) == 0.0
        page.uncheck(f"#head-{layer}-{head}")
        shown = float(page.get_attribute("#kl", "data-value"))
        assert state(page)["off"] == [f"{layer}.{head}"]
        tokens = state(page)["seq"]
    model = run.model()
    changed = model(tokens, hooks={f"blocks.{layer}.attn.hook_z": zero_head(head)})[0, -1]
    expected = kl(model(tokens)[0, -1], changed)
    assert expected > 1e-6  # the head matters, so the check has teeth
    assert abs(shown - expected) < 1e-9


def test_every_knob_equals_its_python_hook(chromium, page_of, two_layer_run):
    """Head off, MLP off, positions off and beta together, set through a shared link."""
    run = load_run(two_layer_run)
    beta = 0.5
    with visit(
        chromium, page_of(run.path), f"#seq=3.11.4.8&off=0.0&mlp=1&pos=off&beta={beta}"
    ) as page:
        assert state(page)["seq"] == [3, 11, 4, 8]
        shown = float(page.get_attribute("#kl", "data-value"))

    def scale(scores, name):
        return np.where(np.isfinite(scores), beta * scores, scores)

    hooks = {
        "blocks.0.attn.hook_z": zero_head(0),
        "blocks.1.hook_mlp_out": lambda x, n: 0 * x,
        "hook_pos_embed": lambda x, n: 0 * x,
        "blocks.0.attn.hook_attn_scores": scale,
        "blocks.1.attn.hook_attn_scores": scale,
    }
    model = run.model()
    tokens = [3, 11, 4, 8]
    expected = kl(model(tokens)[0, -1], model(tokens, hooks=hooks)[0, -1])
    assert abs(shown - expected) < 1e-9


def mulberry32(seed):
    """The page's generator, in Python: the same 32-bit arithmetic."""
    a = seed & 0xFFFFFFFF
    while True:
        a = (a + 0x6D2B79F5) & 0xFFFFFFFF
        t = ((a ^ (a >> 15)) * (a | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        yield ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296


def sample(logits, u, temperature, top_k, top_p):
    """The page's sampling rule: temperature, top-k, top-p, then the cumulative slice holding u."""
    x = logits / temperature
    p = np.exp(x - x.max())
    p = p / p.sum()
    kept, mass = [], 0.0
    for i in sorted(range(len(p)), key=lambda i: (-p[i], i)):
        if (top_k and len(kept) >= top_k) or (kept and mass >= top_p):
            break
        kept.append(i)
        mass += p[i]
    total = sum(p[i] for i in kept)
    c = 0.0
    for i in sorted(kept):
        if u < c + p[i] / total:
            return i
        c += p[i] / total
    return sorted(kept)[-1]


def test_the_seeded_sampler_repeats_and_matches_a_python_oracle(chromium, page_of, paper_run):
    run = load_run(paper_run)
    path = page_of(run.path)
    read = "rows => rows.map(r => [+r.dataset.u, +r.dataset.token])"
    draws = []
    for _ in range(2):  # two separate loads of the same link
        with visit(chromium, path, "#seed=12345&temp=1.7&p=0.95&n=10") as page:
            draws.append(page.eval_on_selector_all("#draws tbody tr", read))
            prompt = state(page)["seq"]
            page.fill("#seed", "12346")
            page.press("#seed", "Enter")
            other = page.eval_on_selector_all("#draws tbody tr", read)
            page.uncheck("#head-0-0")  # generation uses the changed model
            ablated = page.eval_on_selector_all("#draws tbody tr", read)
            page.evaluate("explorer.set({temp: 0.01})")  # near-greedy: no overflow, no NaN
            greedy = page.eval_on_selector_all("#draws tbody tr", read)
            entropy = float(page.get_attribute("#entropy", "data-value"))
    assert len(draws[0]) == 10 and draws[0] == draws[1]
    assert [u for u, _ in other] != [u for u, _ in draws[0]]
    model = run.model()
    hooks = {"blocks.0.attn.hook_z": zero_head(0)}
    for shown, seed, temperature, knobs in (
        (draws[0], 12345, 1.7, None),
        (ablated, 12346, 1.7, hooks),
        (greedy, 12346, 0.01, hooks),
    ):
        rng, seq = mulberry32(seed), list(prompt)
        for u, token in shown:
            assert u == next(rng)
            logits = model(seq[-run.cfg.n_ctx :], hooks=knobs)[0, -1]
            assert token == sample(logits, u, temperature, 0, 0.95)
            seq.append(token)
    assert math.isfinite(entropy) and entropy >= 0


def test_vocabulary_markup_shows_as_text_and_runs_nothing(chromium, tmp_path):
    from flatformer.readout.labels import short

    cfg = preset("paper-2d", 5)
    vocab = ["0", "1", EVIL, "</script><u id=evil>bold</u>", "+"]
    model = Transformer(cfg, init_params(cfg, [np.random.default_rng(3)]).seed(0))
    path = tmp_path / "evil.html"
    path.write_text(render_html(model, vocab=vocab), encoding="utf-8")
    with visit(chromium, path, "#seq=2.3.2.0&cell=0.0.2.0") as page:
        assert page.evaluate("explorer.selfCheck.ok")
        assert page.evaluate("document.querySelectorAll('img, u, #evil').length") == 0
        assert (
            page.eval_on_selector_all(".palette .tok", "els => els.map(e => e.textContent)")
            == vocab
        )
        assert page.eval_on_selector_all(
            "#input .chip-text", "els => els.map(e => e.textContent)"
        ) == [short(EVIL), short(vocab[3]), short(EVIL), "0"]  # cut as figures cut them
        assert short(EVIL) in page.text_content("#arith-0 h3")
        assert EVIL in page.evaluate("document.body.innerText")
        # A word with spaces can be typed, too.
        page.fill("#seq-text", f"0 {EVIL} 1")
        page.press("#seq-text", "Enter")
        assert state(page)["seq"] == [0, 2, 1]


def test_the_checkpoint_slider_replays_training_in_the_geometry(chromium, page_of, paper_run):
    run = load_run(paper_run)
    with visit(chromium, page_of(run.path)) as page:
        before = page.evaluate("explorer.geometry()")
        pixels = page.evaluate("document.querySelector('#embed canvas.plane').toDataURL()")
        page.locator("#step").fill("0")  # the slider's leftmost checkpoint
        after = page.evaluate("explorer.geometry()")
        assert page.evaluate("document.querySelector('#embed canvas.plane').toDataURL()") != pixels
        assert page.text_content("#step-label") == "step 0"
        page.wait_for_function("() => location.hash.includes('step=0')")
        assert after["qk"]["keys"] != before["qk"]["keys"]
        assert after["landscape"]["Z"] != before["landscape"]["Z"]
    for geometry, step in ((before, run.steps[-1]), (after, 0)):
        assert geometry["embed"]["step"] == step
        w = run.weights(step)
        sums = [
            w["embed.W_E"][v] + w["pos_embed.W_pos"][t]
            for t in range(run.cfg.n_ctx)
            for v in range(run.cfg.d_vocab)
        ]
        np.testing.assert_allclose(geometry["embed"]["sums"], sums, atol=1e-12)
        np.testing.assert_allclose(geometry["embed"]["tokens"], w["embed.W_E"], atol=1e-12)


def test_sequence_editing_refuses_bad_tokens_and_links_reproduce_the_view(
    chromium, page_of, paper_run
):
    path = page_of(load_run(paper_run).path)
    with visit(chromium, path) as page:
        demo = state(page)["seq"]
        page.fill("#seq-text", "4 1 banana +")
        page.press("#seq-text", "Enter")
        assert "banana" in page.text_content(
            "#seq-msg"
        ) and "not in the vocabulary" in page.text_content("#seq-msg")
        assert state(page)["seq"] == demo
        page.fill("#seq-text", "2 + 9 9 9 9 9 9 9")
        page.press("#seq-text", "Enter")
        assert "context holds 8" in page.text_content("#seq-msg")
        page.fill("#seq-text", "2 5 +")
        page.press("#seq-text", "Enter")
        page.click('.palette .tok[data-token="10"]')
        assert state(page)["seq"] == [2, 5, 11, 10]
        page.click('#input .chip button[aria-label="remove token 1"]')
        assert state(page)["seq"] == [2, 11, 10]
        page.uncheck("#mlp-0")
        page.fill("#seed", "99")
        page.press("#seed", "Enter")
        page.wait_for_function(
            "() => location.hash.includes('seed=99') && location.hash.includes('mlp=0')"
        )
        link, shared = page.evaluate("location.href"), state(page)
        kl_value = page.get_attribute("#kl", "data-value")
        tokens = page.get_attribute("#generated", "data-tokens")
    with visit(chromium, path, "#" + link.split("#", 1)[1]) as page:
        assert state(page) == shared
        assert page.get_attribute("#kl", "data-value") == kl_value
        assert page.get_attribute("#generated", "data-tokens") == tokens


def test_the_page_works_inside_a_sandboxed_iframe(chromium, paper_run, tmp_path):
    """What a notebook's _repr_html_ shows: the page as <iframe srcdoc>, scripts only."""
    path = tmp_path / "notebook.html"
    path.write_text(
        "<!DOCTYPE html><title>notebook</title>"
        + render_html(paper_run, inline=True, max_checkpoints=3),
        encoding="utf-8",
    )
    with visit(chromium, path, ready=None) as page:
        frame = page.frame_locator("iframe")
        frame.locator("#selfcheck.ok").wait_for()
        assert "passed" in frame.locator("#selfcheck").text_content()
        frame.locator("#head-0-0").uncheck()  # knobs work; the hash cannot be written
        assert float(frame.locator("#kl").get_attribute("data-value")) > 0


@pytest.mark.parametrize("fixture", ["paper_run", "two_layer_run"])
def test_the_circuit_panel_equals_python_edge_ablation(chromium, page_of, request, fixture):
    from flatformer.tasks.windows import TaskData
    from flatformer.edges.graph import EdgeGraph
    from flatformer.edges.methods import sender_outputs
    from flatformer.readout.probs import kl_divergence

    run_dir = request.getfixturevalue(fixture)
    run = load_run(run_dir)
    graph = EdgeGraph(run.model())
    data = TaskData.build(run.task, run.cfg.n_ctx)
    means = {s: out.mean(0) for s, out in sender_outputs(graph, data.val_inputs).items()}
    with visit(chromium, page_of(run_dir)) as page:
        seq = np.array(state(page)["seq"])
        T = len(seq)
        refs = {s: m[:T] for s, m in means.items()}
        shown = page.evaluate("explorer.edges")
        assert page.evaluate("explorer.model.edgeGraph(explorer.data.config).edges") == [
            list(e) for e in graph.edges
        ]
        for s in graph.senders:
            np.testing.assert_allclose(shown["refs"][s], refs[s], atol=1e-9, rtol=0)
        # widths: the KL of each edge ablated alone, as Python computes it
        alone = np.ones((graph.n_edges, graph.n_edges)) - np.eye(graph.n_edges)
        clean = graph.forward(seq[None], refs, np.ones((1, graph.n_edges)))[0][0, 0, -1]
        each = graph.forward(seq[None], refs, alone)[0][:, 0, -1]
        np.testing.assert_allclose(shown["effect"], kl_divergence(clean, each), atol=1e-9, rtol=0)
        # click an edge: it is ablated, and the output is Python's with that edge ablated
        edge = graph.edge_index("tok", "a0.0.v")
        page.locator(f'g.edge[data-edge="{edge}"]').dispatch_event("click")
        assert state(page)["cut"] == [edge]
        mask = np.ones(graph.n_edges)
        mask[edge] = 0
        logits = graph.forward(seq[None], refs, mask[None])[0][0, 0, -1]
        np.testing.assert_allclose(
            page.evaluate("explorer.edges.logits"), logits, atol=1e-9, rtol=0
        )
        assert page.locator(f'g.edge[data-edge="{edge}"]').get_attribute("data-kept") == "0"
        # circuit only: every edge outside the exported circuit ablated as well
        page.locator("#circuit-only").check()
        # (the address bar is written 120 ms later, debounced: read the hash the page makes)
        assert state(page)["only"] and "only=circuit" in page.evaluate("explorer.hash()")
        kept = {tuple(e) for e in page.evaluate("explorer.data.circuit.edges")}
        mask = np.array([float(e in kept) for e in graph.edges])
        mask[edge] = 0
        logits = graph.forward(seq[None], refs, mask[None])[0][0, 0, -1]
        np.testing.assert_allclose(
            page.evaluate("explorer.edges.logits"), logits, atol=1e-9, rtol=0
        )


@pytest.mark.parametrize("fixture", RUNS)
def test_every_knob_on_the_page_equals_analyze_json(chromium, page_of, request, fixture, tmp_path):
    """The page's knob table and `flatformer analyze --json` are one definition: the same knobs
    (zero and mean ablation of every head, every MLP, positions, each beta), the same KL
    direction, the same numbers to 1e-9 on the same prompt."""
    import json

    from clitools import cli

    run = load_run(request.getfixturevalue(fixture))
    with visit(chromium, page_of(run.path)) as page:
        tokens = state(page)["seq"]
        rows = page.eval_on_selector_all(
            "#ablations tr[data-knob]", "els => els.map(e => [e.dataset.knob, e.dataset.kl])"
        )
        text = page.text_content("#knobs")
    assert "KL(original ‖ changed)" in text
    prompts = tmp_path / "prompt.txt"
    prompts.write_text(run.task.decode(tokens) + "\n")
    result = cli("analyze", run.path, "--json", "--prompts", prompts)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kl"] == "KL(original || changed)"
    expected = {knob["name"]: knob["kl"][0] for knob in report["knobs"]}
    shown = {name: float(value) for name, value in rows}
    assert list(shown) == list(expected)  # same knobs, same order
    assert any(name.endswith("mean") for name in shown) and "beta 0.5" in shown
    assert max(expected.values()) > 1e-6  # some knob matters: the check has teeth
    for name, value in expected.items():
        assert abs(shown[name] - value) < 1e-9, name


def test_induction_page_shows_the_python_head_scores_and_composition(
    chromium, page_of, induction_run
):
    from flatformer.analysis.induction import head_scores

    run = load_run(induction_run)
    with visit(chromium, page_of(run.path)) as page:
        assert page.evaluate("explorer.selfCheck")["ok"]
        panels = page.eval_on_selector_all("section.panel", "els => els.map(e => e.id)")
        assert panels == [
            "input",
            "embed",
            "attend-0",
            "attend-1",
            "readout",
            "knobs",
            "circuits",
            "edges",
            "composition",
            "lens",
        ]
        for step in (run.steps[-1], run.steps[0]):
            page.evaluate(f"explorer.set({{step: {step}}})")
            scores = head_scores(run.model(step))
            for layer, h in [(0, 0), (0, 1), (1, 0), (1, 1)]:
                box = page.locator(
                    f'#attend-{layer} .head-card[data-head="{layer}.{h}"] .head-scores'
                )
                assert float(box.get_attribute("data-prev")) == scores.prev_token[layer, h]
                assert float(box.get_attribute("data-prefix")) == scores.prefix_matching[layer, h]
            for a, b in [(0, 2), (0, 3), (1, 2), (1, 3)]:
                pair = f"{a // 2}.{a % 2}>{b // 2}.{b % 2}"
                for mode in "qkv":
                    cell = page.locator(
                        f'#composition-table tr[data-pair="{pair}"] td[data-mode="{mode}"]'
                    )
                    assert float(cell.get_attribute("data-value")) == scores.composition[mode][a, b]
            assert page.locator("#composition-graph line").count() == 4
