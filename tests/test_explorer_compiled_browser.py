"""The explorer page of a compiled RASP program (a model that attends both ways, whose logits
are the program's values), in real headless Chromium: the self-check passes, nothing is
masked, a key after its query holds Python's numbers, and the page shows the program's output
by its classes' names (reverse of 1 2 3 is 3 2 1), escaped. The page made no request beyond
its own file and logged no error (`visit`)."""

import numpy as np
import pytest

from flatformer import rasp
from flatformer.explorer import render_html
from flatformer.explorer.export import export_run
from flatformer.rasp import library
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.run import write_compiled_run
from flatformer.rasp.validate import validate
from flatformer.store.runs import load_run
from test_explorer_browser import state, visit

REVERSE = library.make_reverse(rasp.tokens)
EVIL = "<svg onload=alert(1)>"  # shorter than a label's cut (labels.MAX_LABEL)


def compiled_page(folder, vocab, max_len):
    """The run of reverse compiled over `vocab`, and its explorer file."""
    compiled = compile_rasp_to_model(REVERSE, vocab, max_len)
    result = validate(REVERSE, compiled)
    assert not result.mismatches
    write_compiled_run(REVERSE, compiled, result, "reverse", folder / "run")
    page = folder / "page.html"
    page.write_text(render_html(folder / "run"), encoding="utf-8")
    return load_run(folder / "run"), page


@pytest.fixture(scope="module")
def reverse_page(tmp_path_factory):
    return compiled_page(tmp_path_factory.mktemp("reverse"), [1, 2, 3], 5)


def shown_outputs(page) -> list[str]:
    return page.eval_on_selector_all(
        "#outputs tbody tr", "rows => rows.slice(1).map(r => r.dataset.output)"
    )


def test_a_compiled_reverse_page_checks_itself_and_shows_the_program_output(chromium, reverse_page):
    run, path = reverse_page
    assert not run.cfg.causal and run.vocab_out != run.vocab
    with visit(chromium, path) as page:
        check = page.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9 and check["tokens"] == run.cfg.d_vocab
        assert page.locator("#selfcheck").get_attribute("class") == "banner ok"
        # the demo, a recorded input: the outputs are the interpreter's values
        demo = [int(run.vocab[t]) for t in state(page)["seq"][1:]]
        assert shown_outputs(page) == [str(v) for v in rasp.evaluate(REVERSE, demo)]
        # reverse of 1 2 3 is 3 2 1, named by the output classes
        page.evaluate("explorer.set({seq: [0, 1, 2, 3], cell: null})")
        assert rasp.evaluate(REVERSE, [1, 2, 3]) == [3, 2, 1]
        assert shown_outputs(page) == ["3", "2", "1"]
        assert page.locator("#program-output").text_content() == "program(1 2 3) = 3 2 1"
        assert page.locator("#next").text_content() == "program's output: 3 2 1"
        assert "position i + 1 is the program's value at position i" in (
            page.locator("#program-note").text_content()
        )
        # the logits' columns are the classes, not the input vocabulary (BOS is no class)
        columns = page.eval_on_selector_all(
            '#readout figure[data-hook^="unembed"] .col-labels > *',
            "els => els.map(e => e.textContent)",
        )
        assert columns == run.vocab_out
        # another input: the outputs follow the interpreter
        page.evaluate("explorer.set({seq: [0, 2, 1, 3, 3, 1], cell: null})")
        assert shown_outputs(page) == [str(v) for v in rasp.evaluate(REVERSE, [2, 1, 3, 3, 1])]
        assert "next token" not in page.locator("#knobs").text_content()
        # the circuit panel highlights the program's known circuit, in the graph's names
        known = run.config["imported"]["circuit"]["edges"]
        assert f"the {len(known)} of " in page.locator("#edges").text_content()
        assert "the compiled program's known circuit" in page.locator("#edges").text_content()
        page.evaluate("explorer.set({only: true})")
        kept = page.eval_on_selector_all(
            "g.edge[data-kept='1']", "els => els.map(e => [e.dataset.src, e.dataset.dst])"
        )
        assert sorted(kept) == sorted(known)


def test_a_key_after_its_query_is_read_with_python_numbers(chromium, reverse_page):
    run, path = reverse_page
    layer, q, k = 3, 1, 3  # reverse's last head: value 0 (position 1) reads the last, 3
    with visit(chromium, path, f"#seq=0.1.2.3&cell={layer}.0.{q}.{k}") as page:
        qk = page.evaluate("explorer.geometry().qk")
        assert qk["query"] == q and qk["masked"] == [False] * len(qk["keys"])
        shown = dict(
            page.eval_on_selector_all(
                f"#arith-{layer} [data-key]",
                "els => els.map(e => [e.dataset.key, +e.dataset.value])",
            )
        )
        tokens = state(page)["seq"]
    _, cache = run.model().run_with_cache(tokens)
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, 0, q]
    scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0, 0, q]
    assert pattern[k] > 0.5  # the key read lies after the query
    assert shown["score"] == pytest.approx(scores[k], abs=1e-9)
    for j in range(len(tokens)):
        assert np.isfinite(scores[j])
        assert shown[f"row.{j}.score"] == pytest.approx(scores[j], abs=1e-9)
        assert shown[f"row.{j}.weight"] == pytest.approx(pattern[j], abs=1e-9)


def test_class_names_are_shown_as_text(chromium, tmp_path):
    run, path = compiled_page(tmp_path, [EVIL, "b"], 3)
    assert EVIL in run.vocab_out
    with visit(chromium, path) as page:  # an executed name would open a dialog
        assert page.evaluate("explorer.selfCheck")["ok"]
        page.evaluate("explorer.set({seq: [0, 1, 2, 2], cell: null})")
        assert shown_outputs(page) == ["b", "b", EVIL]
        assert page.locator("#program-output").text_content() == f"program({EVIL} b b) = b b {EVIL}"
        assert page.locator("#outputs svg").count() == 0


def test_the_page_opens_on_a_program_input_read_after_bos(reverse_page):
    run, _ = reverse_page
    assert export_run(run.path, prompt="3 1 2")["demo"] == [0, 3, 1, 2]
    assert export_run(run.path, prompt="BOS 3 1")["demo"] == [0, 3, 1]
    data = export_run(run.path)
    assert data["vocab_out"] == ["1", "2", "3"] and "position i + 1" in data["program"]


def test_the_streams_columns_are_named_by_their_variables(chromium, reverse_page):
    """Every residual direction of a compiled run is a variable's value: the stream's maps
    name their columns so, and a page of a model not trained here shows no empty curve."""
    run, path = reverse_page
    names = run.config["imported"]["rasp"]["residual"]
    with visit(chromium, path) as page:
        for hook in ("hook_embed", "blocks.0.hook_resid_pre", "blocks.0.hook_attn_out"):
            columns = page.eval_on_selector_all(
                f'figure[data-hook="{hook}"] .col-labels > *', "els => els.map(e => e.title)"
            )
            assert columns == names
        assert "length:3" in names and page.locator("#curve").count() == 0
