"""The page's forward pass is written once, in model.js, and every consumer runs it.

The scripts' text: each page script that runs the forward pass (`FlatModel.run`, or the
explorer's `forward` over it) is named below with what it uses it for, so a new consumer is
added here knowingly; no script but model.js defines a forward pass or one of its pieces
(LayerNorm, attention, the MLP's nonlinearity). Under node (tests/js/consumers.test.js), the
consumers that need no DOM are run with model.js's passes counted: the playground's trainer,
its held-out evaluation, the sampler and the playground explorer's self-check.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flatformer.explorer.page import CONSTANTS

ROOT = Path(__file__).resolve().parents[1]
EXPLORER = ROOT / "flatformer" / "explorer"
NODE = shutil.which("node")

# Each consumer of model.js's forward pass, and what it runs it for.
CONSUMERS = {
    "train.js": "the playground's trainer: its backward pass reads the activations run leaves",
    "session.js": "the playground's held-out loss and rule error",
    "playground-explore.js": "the playground explorer's self-check reference",
    "playground.js": "the playground's attention pictures and a head's KL",
    "page.js": "the explorer's panels: every panel reads the run compute() makes",
    "panels-readout.js": "the knob sweep's logits",
    "measures.js": "the sampler's generation",
}

# A call of model.js's forward pass: FlatModel.run / .forward under any of the names the
# scripts give FlatModel (FM, M, M_), or `forward(` destructured from it.
CALLS = re.compile(r"\b(?:FlatModel|FM|M_|M)\.(?:run|forward)\(|(?<![.\w])forward\(")

# The marks of a forward pass or one of its pieces: a definition of the pass, LayerNorm's eps
# (only a LayerNorm's forward reads it), the tanh GELU, the erf GELU's erf, the attention
# pattern written (the backward pass only reads it) and a softmax over attention scores.
PIECES = {
    "a forward pass": re.compile(
        r"function\s+(?:forward|run|lnForward|lnRow|layerNorm|attendHead|attention|mlp)\b"
    ),
    "LayerNorm": re.compile(r"\bLN_EPS\b"),
    "the tanh GELU": re.compile(r"Math\.tanh\("),
    "the erf GELU": re.compile(r"(?<![.\w])erf\("),
    "the attention pattern": re.compile(r"\bpattern\[[^\]]+\]\s*(?:=|\+=|/=)(?!=)"),
    "softmax attention": re.compile(r"softmax\(\s*(?:row|scores?)\b"),
}


def code(text: str) -> str:
    """A script without its comments (a comment may name LN_EPS or a forward pass)."""
    return re.sub(r"(?m)^\s*//.*$|\s//.*$", "", text)


def scripts() -> dict[str, str]:
    return {p.name: code(p.read_text(encoding="utf-8")) for p in sorted(EXPLORER.glob("*.js"))}


def test_each_consumer_of_the_forward_pass_is_named():
    found = {name for name, text in scripts().items() if name != "model.js" and CALLS.search(text)}
    assert found == set(CONSUMERS), (
        f"run the forward pass but are not named: {sorted(found - set(CONSUMERS))}; "
        f"named but do not: {sorted(set(CONSUMERS) - found)}"
    )


def test_no_script_but_model_js_writes_the_forward_pass():
    texts = scripts()
    for piece, mark in PIECES.items():
        assert mark.search(texts["model.js"]), f"model.js has no {piece}: the mark is stale"
        writers = [name for name, text in texts.items() if name != "model.js" and mark.search(text)]
        assert writers == [], f"{piece} written outside model.js, in {writers}"


def test_the_marks_find_the_trainers_own_forward_pass_as_it_was():
    """The marks above would have caught the playground's trainer when it kept its own forward
    pass beside model.js's: its LayerNorm, tanh GELU, attention pattern and `forward`."""
    before = """
    function lnForward(x, xo, d, w, wo, b, bo, xhat, out, eps) {}
    function forward(cfg, P, tokens) {
      const {LN_EPS, GELU_C} = FM.constants();
      const tt = Math.tanh(GELU_C * s * (1 + 0.044715 * s * s));
      for (let j = 0; j <= i; j++) pattern[row + j] /= tot;
    }"""
    caught = {piece for piece, mark in PIECES.items() if mark.search(before)}
    assert {"a forward pass", "LayerNorm", "the tanh GELU", "the attention pattern"} <= caught


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_consumers_run_model_js_forward_under_node(tmp_path):
    path = tmp_path / "constants.json"
    path.write_text(json.dumps(CONSTANTS))
    result = subprocess.run(
        [NODE, "--test", str(ROOT / "tests/js/consumers.test.js")],
        env={"CONSTANTS_FIXTURE": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout and "# pass 5" in result.stdout
