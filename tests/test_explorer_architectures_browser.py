"""The explorer page of the newer architectures (an imported Llama: RMSNorm, rotary positions,
SwiGLU, grouped keys and values; GPT-J and Pythia's parallel blocks and partial rotary, SoLU,
shortformer positions, GPT-Neo's local layers), in real headless Chromium: the self-check
passes, every activation is on the page, the circuit panel's graph is flatformer.edges', a
clicked attention cell's arithmetic is Python's, and a switched-off head's KL is Python's. The
page made no request beyond its own file and logged no error."""

import json

import numpy as np
import pytest

from clitools import cli_here
from flatformer.config import ModelConfig
from flatformer.edges.graph import EdgeGraph
from flatformer.engine.model import hook_names, init_params
from flatformer.explorer import render_html
from flatformer.store.runs import load_run
from flatformer.model.transformer import Transformer
from test_explorer_browser import kl, state, visit, zero_head
from test_import_hf_modern import V, build


def every_activation_is_shown(page, cfg) -> set:
    """The hook names the page labels, holding every activation but the norms' scales, the
    later layers' resid_pre (the previous resid_post) and q and k before their turn."""
    shown = set(page.eval_on_selector_all("code.hook", "els => els.map(e => e.textContent)"))
    wanted = {
        n
        for n in hook_names(cfg)
        if "hook_scale" not in n
        and not (n.endswith("hook_resid_pre") and not n.startswith("blocks.0."))
        and not n.endswith(("attn.hook_q", "attn.hook_k"))  # shown turned: hook_rot_q, _k
    }
    assert wanted <= shown, wanted - shown
    return shown


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    """A Hugging Face Llama folder (two query heads for each key and value head), imported."""
    folder = tmp_path_factory.mktemp("llama")
    build("llama").save_pretrained(folder / "hf")
    (folder / "corpus.txt").write_text(" ".join(str(i % V) for i in range(200)))
    made = cli_here(
        "import", folder / "hf", "--corpus", folder / "corpus.txt", "--out", folder / "run"
    )
    assert made.returncode == 0, made.stderr
    return folder / "run"


def test_a_llama_page_checks_itself_and_shows_every_activation(chromium, llama_run, tmp_path):
    run = load_run(llama_run)
    cfg = run.cfg
    assert cfg.rotary and cfg.gated_mlp and cfg.normalization == "pre_rms" and cfg.grouped
    path = tmp_path / "page.html"
    path.write_text(render_html(llama_run), encoding="utf-8")
    with visit(chromium, path, "#cell=0.1.5.2") as page:
        check = page.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9 and check["tokens"] == cfg.d_vocab
        assert page.locator("#selfcheck").get_attribute("class") == "banner ok"
        shown = every_activation_is_shown(page, cfg)
        assert "pos_embed.W_pos" not in shown and "hook_pos_embed" not in shown
        # the circuit panel's graph: flatformer.edges' (no pos node), every edge drawn
        graph = EdgeGraph(run.model())
        edges = page.evaluate("explorer.model.edgeGraph(explorer.data.config).edges")
        assert edges == [list(e) for e in graph.edges] and graph.senders[0:2] == ["tok", "a0.0"]
        drawn = page.eval_on_selector_all("g.edge[data-edge]", "els => els.length")
        assert drawn == graph.n_edges
        # the arithmetic of query 5 -> key 2 of head 0.1: the turned q and k (its group's, 0),
        # as Python's cache holds them
        tokens = state(page)["seq"]
        _, cache = run.model().run_with_cache(tokens)
        q = cache["blocks.0.attn.hook_rot_q"][0, 5, 1]
        k = cache["blocks.0.attn.hook_rot_k"][0, 2, 0]
        dot = float(page.locator("#arith-0 [data-key='dot']").get_attribute("data-value"))
        assert abs(dot - float(q @ k)) < 1e-9
        assert float(page.locator("#arith-0 [data-key='score']").get_attribute("data-value")) == (
            pytest.approx(float(cache["blocks.0.attn.hook_attn_scores"][0, 1, 5, 2]), abs=1e-9)
        )
        page.uncheck("#head-1-0")
        shown_kl = float(page.get_attribute("#kl", "data-value"))
        tokens = state(page)["seq"]
    model = run.model()
    changed = model(tokens, hooks={"blocks.1.attn.hook_z": zero_head(0)})[0, -1]
    expected = kl(model(tokens)[0, -1], changed)
    assert expected > 1e-6 and abs(shown_kl - expected) < 1e-9


# Models written directly, one per feature the page computes beyond the Llama above.
DIRECT = {
    # GPT-J's neighbouring pairs, a quarter of each head turned, GeGLU, parallel blocks
    "gptj": dict(normalization="pre_ln", eps=1e-6, positional_embedding_type="rotary",
                 rotary_dim=2, rotary_adjacent_pairs=True, gated_mlp=True, act_fn="gelu",
                 parallel_attn_mlp=True, qkv_bias=True, attn_out=True, ln_final=True),
    # Pythia: partial rotary halves, parallel blocks, the exact GELU, b_O
    "pythia": dict(normalization="pre_ln", positional_embedding_type="rotary", rotary_dim=2,
                   parallel_attn_mlp=True, act_fn="gelu_erf", qkv_bias=True, attn_out=True,
                   attn_out_bias=True, ln_final=True),
    # TransformerLens's solu-Nl and attn-only-Nl (shortformer positions)
    "solu": dict(normalization="pre_ln", act_fn="solu_ln", attn_out=True, ln_final=True),
    "attn-only-shortformer": dict(positional_embedding_type="shortformer", d_mlp=0,
                                  normalization="pre_ln", attn_out=True, ln_final=True),
    # GPT-Neo: a global and a local layer
    "gpt-neo": dict(normalization="pre_ln", attn_types=("global", "local"), window_size=3,
                    attn_out=True, ln_final=True, act_fn="gelu"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(DIRECT))
def test_a_page_of_each_architecture_checks_itself(chromium, tmp_path, name):
    sizes = dict(d_model=16, n_heads=4, d_head=4, n_layers=2, d_mlp=24, n_ctx=7, d_vocab=11)
    cfg = ModelConfig(**{**sizes, **DIRECT[name]})
    params = init_params(cfg, [np.random.default_rng(0)])
    rng = np.random.default_rng(1)
    for key, view in params.views.items():
        if "ln" in key or "b_" in key:
            view += 0.3 * rng.standard_normal(view.shape)
    path = tmp_path / "page.html"
    vocab = [f"t{i}" for i in range(cfg.d_vocab)]
    model = Transformer(cfg, params.seed(0))
    path.write_text(render_html(model, vocab=vocab), encoding="utf-8")
    with visit(chromium, path, "#cell=1.2.6.4") as page:
        check = page.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9, json.dumps(check)
        every_activation_is_shown(page, cfg)
        edges = page.evaluate("explorer.model.edgeGraph(explorer.data.config).edges")
        assert edges == [list(e) for e in EdgeGraph(model).edges]
        _, cache = model.run_with_cache(state(page)["seq"])
        score = float(page.locator("#arith-1 [data-key='score']").get_attribute("data-value"))
        assert abs(score - float(cache["blocks.1.attn.hook_attn_scores"][0, 2, 6, 4])) < 1e-9
