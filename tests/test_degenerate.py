"""Degenerate data: stimuli that are all alike, a held-out text shorter than the context, a
temperature that underflows, weights that overflow. Each is a result or one line, and never a
measure of nothing printed as a success; `--json` is always JSON (no NaN)."""

import json
import shutil

import numpy as np
import pytest
from clitools import assert_one_line_error, cli_here

STEP = "checkpoints/step_020000.safetensors"


def strict(text: str):
    def refuse(name):
        raise ValueError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def run(paper_run, tmp_path):
    shutil.copytree(paper_run, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("as_json", [[], ["--json"]])
@pytest.mark.parametrize(
    "lines", ["1 + 2\n1 + 2\n1 + 2\n", "1 + 2\n1 + 2\n3 + 4\n1 + 2\n"], ids=["one", "two"]
)
def test_stimuli_that_are_alike_are_one_line(run, tmp_path, lines, as_json):
    (tmp_path / "stimuli.txt").write_text(lines)
    result = cli_here("geometry", run, "--stimuli", tmp_path / "stimuli.txt", *as_json)
    assert_one_line_error(result, "3 different prompts")
    assert result.stdout == ""


def test_geometry_json_is_strict_json(run, tmp_path):
    (tmp_path / "stimuli.txt").write_text("1 + 2\n2 + 2\n3 + 4\n5\n")
    result = cli_here("geometry", run, "--stimuli", tmp_path / "stimuli.txt", "--json")
    assert result.returncode == 0, result.stderr
    report = strict(result.stdout)
    assert report["activations"]


def test_activations_that_never_vary_are_one_line_not_empty_matrices(run, tmp_path):
    from safetensors.numpy import load, save

    data = load((run / STEP).read_bytes())
    zeroed = {k: np.zeros_like(v) if not k.startswith("optim.") else v for k, v in data.items()}
    (run / STEP).write_bytes(save(zeroed, metadata={"format": "flatformer-1"}))
    (tmp_path / "stimuli.txt").write_text("1 + 2\n2 + 2\n3 + 4\n")
    result = cli_here("geometry", run, "--stimuli", tmp_path / "stimuli.txt", "--json")
    assert_one_line_error(result, "no activation varies")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    words = np.random.default_rng(0).choice(list("abcdef"), 300)
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text(" ".join(words))
    return path


def test_a_held_out_text_shorter_than_the_context_is_refused_and_the_hint_works(corpus, tmp_path):
    train = ("train", "--corpus", corpus, "--steps", "20")
    refused = cli_here(*train, "--out", tmp_path / "a", "--set", "n_ctx=64")
    assert_one_line_error(refused, "held-out", "--set n_ctx=39")
    assert not (tmp_path / "a").exists()
    accepted = cli_here(*train, "--out", tmp_path / "b", "--set", "n_ctx=39")
    assert accepted.returncode == 0, accepted.stderr
    assert "nan" not in accepted.stdout
    analyzed = cli_here("analyze", tmp_path / "b")
    assert analyzed.returncode == 0, analyzed.stderr


@pytest.mark.parametrize("temperature", ["5e-324", "1e-310", "1e-300"])
def test_a_tiny_temperature_samples_like_greedy(run, temperature):
    common = ("generate", run, "--prompt", "1 + 2", "-n", "5", "--json")
    sampled = cli_here(*common, "--temperature", temperature)
    assert sampled.returncode == 0, sampled.stderr
    greedy = cli_here(*common, "--greedy")
    assert strict(sampled.stdout)["tokens"] == strict(greedy.stdout)["tokens"]


@pytest.mark.parametrize("scale", [1e150, 1e300, 1e307])
def test_huge_finite_weights_generate_or_are_one_line(run, scale):
    from safetensors.numpy import load, save

    data = load((run / STEP).read_bytes())
    for name in ("embed.W_E", "unembed.W_U"):
        data[name] = data[name] * scale
    (run / STEP).write_bytes(save(data, metadata={"format": "flatformer-1"}))
    result = cli_here("generate", run, "--prompt", "1 + 2", "-n", "3", "--json")
    if result.returncode == 0:
        assert len(strict(result.stdout)["tokens"]) == 3
    else:
        assert_one_line_error(result, "not finite")
