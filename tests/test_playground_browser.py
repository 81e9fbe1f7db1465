"""The playground in Chromium from file://: a short training in the Worker under the page's
Content-Security-Policy with no network request; pause, a head switched off, and the page's KL
equal to `flatformer analyze`'s on the downloaded run; the run's `eval` rule error equal to the
page's; the page's gradients equal to the NumPy engine's."""

from __future__ import annotations

import io
import json
import time
import zipfile

import numpy as np
import pytest
from browser import close, open_page
from clitools import cli

from flatformer.config import preset
from flatformer.explorer.playground_page import playground_html
from flatformer.engine.model import Params, backward, cross_entropy, forward, init_params

pytestmark = pytest.mark.slow


def wait(page, expression, timeout=120):
    """Poll a page expression (the CSP forbids the string eval of wait_for_function)."""
    end = time.time() + timeout
    while not page.evaluate(f"() => {expression}"):
        assert time.time() < end, f"timed out waiting for {expression}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, chromium):
    folder = tmp_path_factory.mktemp("playground")
    html = folder / "playground.html"
    html.write_text(playground_html(), encoding="utf-8")
    watched = open_page(chromium, html.as_uri() + "#task=plus-last-even&seed=3")
    page = watched.page
    wait(page, "window.flatformer !== undefined")
    result = page.evaluate(
        "() => window.flatformer.train({task: 'plus-last-even', seed: 3, steps: 600})"
    )
    archive = bytes(
        page.evaluate("async () => Array.from(new Uint8Array(await window.flatformer.exportRun()))")
    )
    zipfile.ZipFile(io.BytesIO(archive)).extractall(folder)
    yield watched, result, folder / "plus-last-even-seed3"
    close(watched)


def test_short_training_runs_offline(trained):
    watched, result, _ = trained
    assert result["steps"] == 600 and 0 <= result["rule_error"] <= 1 and result["loss"] > 0
    assert watched.errors == []
    assert [r for r in watched.requests if not r.startswith(("file:", "blob:", "data:"))] == []
    assert watched.page.evaluate("() => location.hash").startswith("#task=plus-last-even")


def test_eval_of_the_downloaded_run_equals_the_page(trained):
    _, result, run = trained
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps[0] == "step_000000.safetensors" and steps[-1] == "step_000600.safetensors"
    done = cli("eval", run, "--json")
    assert done.returncode == 0, done.stderr
    evaluated = json.loads(done.stdout)
    assert evaluated["step"] == 600
    assert abs(evaluated["rule_error"] - result["rule_error"]) < 1e-12
    assert abs(evaluated["loss"] - result["loss"]) < 1e-9


def test_head_off_kl_equals_analyze(trained, tmp_path):
    watched, _, run = trained
    page = watched.page
    prompt = "4 1 + 4 6 9 5 +"
    page.check("#pg-head-0-0")
    wait(page, "document.getElementById('pg-kl').textContent.includes('KL')")
    kl = page.evaluate(f"() => window.flatformer.kl({json.dumps(prompt)}, ['0.0'])")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(prompt + "\n")
    done = cli("analyze", run, "--prompts", prompts, "--json")
    assert done.returncode == 0, done.stderr
    knob = next(k for k in json.loads(done.stdout)["knobs"] if k["name"] == "head 0.0 zero")
    assert abs(knob["kl"][0] - kl) < 1e-9 and kl > 0


def test_gradients_in_chromium_equal_numpy(trained):
    page = trained[0].page
    cfg = preset("small-4d-2head", 12)
    params = init_params(cfg, [np.random.default_rng(4)])
    rng = np.random.default_rng(5)
    inputs = rng.integers(12, size=(3, 8))
    targets = rng.integers(12, size=(3, 8))
    weights = (rng.random((3, 8)) > 0.2).astype(float)
    p = Params(cfg, 1, params.flat.copy())
    logits, cache = forward(p, inputs[None])
    loss, dlogits = cross_entropy(logits, targets[None], weights[None])
    grad = backward(p, cache, dlogits).flat
    js = page.evaluate(
        """([cfg, flat, batch]) => {
        const P = Float64Array.from(flat), G = new Float64Array(P.length);
        const loss = FlatTrain.lossAndGrad(cfg, P, batch, G);
        return [loss, Array.from(G)];
    }""",
        [
            cfg.to_dict(),
            params.flat.tolist(),
            {"inputs": inputs.tolist(), "targets": targets.tolist(), "weights": weights.tolist()},
        ],
    )
    assert abs(js[0] - loss[0]) < 1e-9
    assert np.max(np.abs(np.array(js[1]) - grad)) < 1e-9


def test_adamw_in_chromium_equals_numpy(trained):
    """30 AdamW steps of the default recipe on the same batches, in Chromium and in NumPy."""
    from flatformer.engine.optim import AdamW
    from flatformer.training.trainer import get_recipe

    page = trained[0].page
    cfg = preset("paper-2d", 12)
    recipe = get_recipe("default", steps=30)
    params = init_params(cfg, [np.random.default_rng(6)], 0.3)
    start = params.flat.copy()
    rng = np.random.default_rng(7)
    batches = [
        {
            "inputs": rng.integers(12, size=(8, 8)).tolist(),
            "targets": rng.integers(12, size=(8, 8)).tolist(),
            "weights": np.ones((8, 8)).tolist(),
        }
        for _ in range(recipe.steps)
    ]
    opt = AdamW(params.flat, recipe.betas, recipe.eps, recipe.weight_decay)
    for step, b in enumerate(batches):
        p = Params(cfg, 1, params.flat)
        logits, cache = forward(p, np.array(b["inputs"])[None])
        _, dlogits = cross_entropy(
            logits, np.array(b["targets"])[None], np.array(b["weights"])[None]
        )
        opt.step(backward(p, cache, dlogits).flat, recipe.lr_at(step))
    js = page.evaluate(
        """([cfg, flat, batches, recipe]) => {
        const P = Float64Array.from(flat), G = new Float64Array(P.length);
        const opt = new FlatTrain.AdamW(P, {betas: recipe.betas, eps: recipe.eps,
                                            weightDecay: recipe.weight_decay});
        batches.forEach((b, step) => { FlatTrain.lossAndGrad(cfg, P, b, G);
                                       opt.step(G, FlatTrain.lrAt(recipe, step)); });
        return Array.from(P);
    }""",
        [cfg.to_dict(), start.tolist(), batches, recipe.to_dict()],
    )
    assert np.max(np.abs(np.array(js) - params.flat)) < 1e-9


def test_the_explorers_panels_open_on_the_trained_weights(trained, tmp_path):
    """Explore: the explorer's own panels mounted on the page's weights; its forward pass
    agrees with the trainer's, and its knob's KL with a head off equals `analyze`'s."""
    watched, _, run = trained
    page = watched.page
    opened = page.evaluate("() => window.flatformer.explore()")
    check = opened["selfCheck"]
    assert check["ok"] and check["worst"] < 1e-9 and check["step"] == opened["step"] == 600
    assert check["tokens"] == 12 and check["places"] == 8 and check["hooks"] > 10
    panels = page.eval_on_selector_all("#pg-explorer section.panel", "els => els.map(e => e.id)")
    assert {"attend-0", "knobs", "circuits", "lens"} <= set(panels)
    prompt = "4 1 + 4 6 9 5 +"
    vocab = page.evaluate("() => window.explorer.data.vocab")
    tokens = [vocab.index(w) for w in prompt.split()]
    page.evaluate(f"() => window.explorer.set({{seq: {tokens}, off: ['0.0']}})")
    kl = float(page.get_attribute("#pg-explorer #kl", "data-value"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(prompt + "\n")
    done = cli("analyze", run, "--prompts", prompts, "--json")
    assert done.returncode == 0, done.stderr
    knob = next(k for k in json.loads(done.stdout)["knobs"] if k["name"] == "head 0.0 zero")
    assert abs(knob["kl"][0] - kl) < 1e-9 and kl > 0
    assert page.evaluate("() => location.hash").startswith("#task=plus-last-even")
    assert watched.errors == []


def test_the_edge_graph_on_the_paused_weights_equals_numpy(trained):
    """Explore: the edge graph mean-ablates over the held-out windows Python's analyses use
    (readout.reference_windows); cutting one edge shows the KL the NumPy edge graph gives on
    the same weights, and no circuit is highlighted (the playground has none)."""
    from flatformer.tasks.windows import TaskData
    from flatformer.edges.graph import EdgeGraph
    from flatformer.edges.methods import sender_outputs
    from flatformer.readout import kl_divergence, reference_windows
    from flatformer.store.runs import load_run

    watched, _, folder = trained
    page = watched.page
    opened = page.evaluate("() => window.flatformer.explore()")
    run = load_run(folder)
    step = opened["step"]
    model = run.model(step)
    windows = reference_windows(TaskData.build(run.task, run.cfg.n_ctx))
    assert page.evaluate("() => window.explorer.data.measures.mean_windows") == windows.tolist()
    assert page.locator("#pg-explorer #edge-graph svg").count() == 1
    assert page.locator("#pg-explorer #circuit-only").count() == 0
    assert page.locator("#pg-explorer #no-circuit").count() == 1
    graph = EdgeGraph(model)
    means = {s: out.mean(0) for s, out in sender_outputs(graph, windows).items()}
    vocab = page.evaluate("() => window.explorer.data.vocab")
    seq = np.array([vocab.index(w) for w in "4 1 + 4 6 9 5 +".split()])
    page.evaluate(f"() => window.explorer.set({{seq: {seq.tolist()}, cut: [], off: []}})")
    refs = {s: m[: len(seq)] for s, m in means.items()}
    clean = graph.forward(seq[None], refs, np.ones((1, graph.n_edges)))[0][0, 0, -1]
    alone = np.ones((graph.n_edges, graph.n_edges)) - np.eye(graph.n_edges)
    each = kl_divergence(clean, graph.forward(seq[None], refs, alone)[0][:, 0, -1])
    edge = int(np.argmax(each))
    assert each[edge] > 0
    # the same weights and windows: the page's mean outputs and unablated logits are NumPy's
    drawn = page.evaluate("() => window.explorer.edges")
    for s in graph.senders:
        np.testing.assert_allclose(drawn["refs"][s], refs[s], atol=1e-9, rtol=0)
    np.testing.assert_allclose(drawn["clean"], clean, atol=1e-9, rtol=0)
    np.testing.assert_allclose(drawn["effect"], each, atol=1e-9, rtol=0)
    assert float(page.get_attribute("#pg-explorer #circuit-note", "data-kl")) == 0
    page.locator(f'#pg-explorer g.edge[data-edge="{edge}"]').dispatch_event("click")
    assert page.evaluate("() => window.explorer.state.cut") == [edge]
    kl = float(page.get_attribute("#pg-explorer #circuit-note", "data-kl"))
    assert abs(kl - each[edge]) < 1e-9
    assert watched.errors == []


def test_pause_holds_the_step_and_the_slider_replays(trained):
    """Runs last: it starts a new training on the page of the others."""
    page = trained[0].page
    page.evaluate("() => { window.flatformer.train({task: 'successor', seed: 1, steps: 20000}); }")
    wait(page, "window.flatformer.state().step >= 300")
    page.click("#pg-pause")
    time.sleep(0.3)
    held = page.evaluate("() => window.flatformer.state().step")
    time.sleep(0.5)
    state = page.evaluate("() => window.flatformer.state()")
    assert state["step"] == held and not state["running"] and not state["done"]
    assert state["frames"] > 0 and state["checkpoints"] >= 3
    page.fill("#pg-slider", "0")
    wait(page, "document.body.textContent.includes('step 0') ")
    assert page.evaluate("() => location.hash").startswith("#task=successor")
