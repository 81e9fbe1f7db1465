"""The graph page (`flatformer graph` writes OUT/<slug>.html beside the JSON) in real headless
Chromium: it opens offline (no request beyond its own file), its self-check recomputes every
link from the weights in the page and matches Python's, hovering a node shows its dashboard,
clicking a link shows its arithmetic (and the QK attribution of a head it passes), and a
subgraph saved as a file and loaded back restores the pins."""

import contextlib
import json

import numpy as np
import pytest

from browser import close, open_page
from clitools import cli_here
from conftest import CONFIGS, random_model
from flatformer.explorer.graph_page import graph_page_html
from flatformer.graph import attribute
from flatformer.graph.files import graph_document, qk_hooks
from flatformer.graph.prune import prune
from flatformer.store.runs import load_run
from test_graph import random_transcoders

READY = "() => document.documentElement.dataset.ready === 'true' || !!document.querySelector('.banner.fail')"
EVIL = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def paper_graph(paper_run, tmp_path_factory):
    """`flatformer graph` on the paper's model: its JSON and its page."""
    out = tmp_path_factory.mktemp("graphview") / "g"
    result = cli_here("graph", paper_run, "--prompt", "5 6 5 3 8 9 2 +", "--out", out)
    assert result.returncode == 0, result.stderr
    return json.loads((out / "graph.json").read_text()), out / "graph.html"


def test_the_examples_are_each_features_largest_activations(paper_run, paper_graph):
    """`examples` against a plain loop over every held-out window and position."""
    from flatformer.dictionary.activations import windows
    from flatformer.graph import load_transcoders
    from flatformer.graph.examples import TOP, WINDOWS

    doc, page_path = paper_graph
    run = load_run(paper_run)
    model = run.model()
    (tc,) = load_transcoders(page_path.parent / "transcoders", model)
    held = windows(run, 1)["eval"]
    assert len(held) <= WINDOWS  # every window is read, so the loop is the whole truth
    _, cache = model.run_with_cache(held)
    f = tc.encode(cache[tc.hook_in])  # (B, T, m)
    assert doc["examples"]
    for key, rows in doc["examples"].items():
        layer, index = map(int, key.split("_"))
        column = f[..., index].ravel()
        best = np.sort(column[column > 0])[::-1][:TOP]
        np.testing.assert_allclose([r["activation"] for r in rows], best, rtol=0, atol=1e-12)
        b, t = np.unravel_index(np.argmax(f[..., index]), f.shape[:2])
        assert rows[0]["tokens"][-1] == run.vocab[held[b, t]]


@contextlib.contextmanager
def visit(chromium, path, fragment=""):
    watched = open_page(chromium, path.as_uri() + fragment, READY)
    try:
        yield watched.page
        assert watched.errors == []
        assert watched.dialogs == []
        assert {url.split("#")[0] for url in watched.requests} == {path.as_uri()}
    finally:
        close(watched)


def test_the_page_opens_offline_and_recomputes_every_link(chromium, paper_graph):
    doc, page_path = paper_graph
    with visit(chromium, page_path) as page:
        check = page.evaluate("graphView.selfCheck")
        assert check["ok"] and check["n"] == len(doc["links"]) and check["worst"] < 1e-9
        assert "Self-check passed" in page.inner_text("#selfcheck")
        assert page.locator("#graph .node").count() == len(doc["nodes"])
        assert page.locator("#graph .link-hit").count() == len(doc["links"])

        # hover a feature: its dashboard, with the file's numbers and its top links
        feature = next(n for n in doc["nodes"] if n["feature_type"] == "cross layer transcoder")
        page.hover(f'#graph .node[data-node="{feature["node_id"]}"]')
        dash = page.locator("#dashboard")
        assert dash.get_attribute("data-node") == feature["node_id"]
        assert f"feature {feature['feature']} of block {feature['layer']}" in dash.inner_text()
        value = float(dash.locator('[data-key="activation"]').get_attribute("data-value"))
        assert value == feature["activation"]
        examples = doc["examples"][f"{feature['layer']}_{feature['feature']}"]
        assert dash.locator("table.examples tr").count() == len(examples) > 0
        shown = dash.locator('table.examples [data-key="example.0"]').get_attribute("data-value")
        assert float(shown) == examples[0]["activation"]
        inputs = [link for link in doc["links"] if link["target"] == feature["node_id"]]
        assert dash.locator("table.inputs tr").count() == min(6, len(inputs))

        # the keyboard: a focused node shows its dashboard, Enter pins it and unpins it
        logit = next(n for n in doc["nodes"] if n["feature_type"] == "logit")
        page.focus(f'#graph .node[data-node="{logit["node_id"]}"]')
        assert dash.get_attribute("data-node") == logit["node_id"]
        page.keyboard.press("Enter")
        assert page.evaluate("[...graphView.state.pinned]") == [logit["node_id"]]
        page.keyboard.press("Enter")
        assert page.evaluate("[...graphView.state.pinned]") == []

        # click the link through the head with the largest weight: its arithmetic
        def through_head(link):
            src, tgt = (
                doc["frozen"]["nodes"][link["source"]],
                doc["frozen"]["nodes"][link["target"]],
            )
            return src["pos"] < tgt["pos"]

        i, link = max(
            ((i, link) for i, link in enumerate(doc["links"]) if through_head(link)),
            key=lambda x: abs(x[1]["weight"]),
        )
        page.locator(f'#graph .link-hit[data-link="{i}"]').dispatch_event("click")
        arith = page.locator("#arith")

        def num(key):
            return float(arith.locator(f'[data-key="{key}"]').first.get_attribute("data-value"))

        assert abs(num("weight") - link["weight"]) < 1e-9
        assert num("activation") * num("path") == pytest.approx(link["weight"], abs=1e-12)
        assert num("file") == link["weight"]
        assert "head 0.0" in arith.inner_text()
        # the QK side table of the head's cell: its terms and rest sum to the score
        qk = arith.locator(".qk-cell").first
        terms = [
            float(x.get_attribute("data-value")) for x in qk.locator('[data-key^="qk."]').all()
        ]
        keys = [x.get_attribute("data-key") for x in qk.locator('[data-key^="qk."]').all()]
        values = dict(zip(keys, terms))
        listed = sum(v for k, v in values.items() if k.split(".")[1].isdigit())
        assert listed + values["qk.rest"] == pytest.approx(values["qk.score"], abs=1e-9)


def test_a_subgraph_saved_then_loaded_restores_the_pins(chromium, paper_graph, tmp_path):
    doc, page_path = paper_graph
    ids = [n["node_id"] for n in doc["nodes"]]
    chosen = [ids[0], ids[len(ids) // 2], ids[-1]]
    with visit(chromium, page_path) as page:
        for node_id in chosen:
            page.click(f'#graph .node[data-node="{node_id}"]')
        assert page.locator("#graph .node.pinned").count() == 3
        page.fill("#group-label", EVIL)
        page.click("#group")
        page.click("#subgraph-save")
        with page.expect_download() as info:
            page.click("#subgraph-download")
        saved = tmp_path / info.value.suggested_filename
        info.value.save_as(saved)
        assert saved.name == "graph-subgraph.json"
        sub = json.loads(saved.read_text())
        assert sub["pinnedIds"] == [i for i in ids if i in chosen]
        grouped = [EVIL, *[i for i in ids if i in chosen]]
        assert sub["supernodes"] == [*doc["qParams"]["supernodes"], grouped]
        assert sub["slug"] == "graph"
        # the fields of Neuronpedia's subgraph-save request
        assert set(sub) == {
            "modelId",
            "slug",
            "displayName",
            "pinnedIds",
            "supernodes",
            "clerps",
            "pruningThreshold",
            "densityThreshold",
            "overwriteId",
        }

        page.click("#unpin")
        n_groups = len(sub["supernodes"])
        page.click(f'#supernodes li[data-group="{n_groups - 1}"] button')
        assert page.locator("#supernodes li").count() == n_groups - 1
        assert page.locator("#graph .node.pinned").count() == 0
        page.set_input_files("#subgraph-file", str(saved))
        page.wait_for_function(
            "() => document.querySelectorAll('#graph .node.pinned').length === 3"
        )
        pinned = page.eval_on_selector_all(
            "#graph .node.pinned", "els => els.map((e) => e.dataset.node)"
        )
        assert sorted(pinned) == sorted(chosen)
        assert "loaded 3 pinned nodes" in page.inner_text("#subgraph-msg")
        assert page.evaluate("graphView.subgraph().supernodes") == sub["supernodes"]
        assert page.locator("#supernodes li").count() == n_groups
        assert EVIL in page.inner_text("#supernodes") and page.locator("img").count() == 0

        # the pins and the open link live in the URL's hash: the link opens the same view
        page.locator('#graph .link-hit[data-link="1"]').dispatch_event("click")
        fragment = page.evaluate("location.hash")
        assert fragment.startswith("#pinned=") and fragment.endswith("&link=1")

        # a file that is not a subgraph is refused in one line; the pins stay
        bad = tmp_path / "bad.json"
        bad.write_text('{"pinnedIds": [1, 2]}')
        page.set_input_files("#subgraph-file", str(bad))
        page.wait_for_function(
            "() => document.querySelector('#subgraph-msg').classList.contains('bad')"
        )
        assert page.locator("#graph .node.pinned").count() == 3
    with visit(chromium, page_path, fragment.replace("&link", ",not_a_node&link")) as page:
        pinned = page.eval_on_selector_all(
            "#graph .node.pinned", "els => els.map((e) => e.dataset.node)"
        )
        assert sorted(pinned) == sorted(chosen)
        assert page.locator("#arith").get_attribute("data-link") == "1"


def test_a_two_layer_graph_with_hostile_names_checks_and_shows_them_as_text(chromium, tmp_path):
    """Two blocks of two heads with LayerNorms and W_O (paths through two heads), and a
    vocabulary whose words are markup."""
    model = random_model(CONFIGS["2-layer-ln-bias"])
    transcoders = random_transcoders(model, seed=1)
    tokens = np.array([1, 2, 3, 4, 5, 6])
    graph = attribute(model, transcoders, tokens, keep=qk_hooks(model.cfg))
    vocab = [EVIL + str(i) for i in range(model.cfg.d_vocab)]
    doc = graph_document(graph, prune(graph, 0.9, 0.99), vocab, transcoders, "two", EVIL, EVIL, 0.9)
    path = tmp_path / "two.html"
    path.write_text(graph_page_html(doc), encoding="utf-8")
    with visit(chromium, path) as page:
        assert page.evaluate("graphView.selfCheck.ok")
        assert EVIL in page.inner_text(".facts")
        assert page.locator("img").count() == 0
        two_hops = page.evaluate(
            """() => graphView.selfCheck.n && [...document.querySelectorAll('#graph .link-hit')]
                 .some((e) => { graphView.showLink(+e.dataset.link);
                                return document.querySelector('#arith').innerText.includes(' then head '); })"""
        )
        assert two_hops
