"""`flatformer geometry` estimates its memory before the forward pass (its RDMs grow with the
square of the stimuli) and refuses in one line what the machine cannot hold, naming the
--stimuli that would fit; and it measures the newer architectures' activations by their own
names."""

import json

import pytest
from clitools import assert_one_line_error, cli_here

from conftest import make_run
from flatformer.config import ModelConfig
from flatformer.engine.model import hook_names
from flatformer.errors import FlatformerError
from flatformer.rsa.report import check_geometry_memory
from flatformer.store.resources import geometry_activations, geometry_fit, geometry_memory


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    """RMSNorm, rotary positions, SwiGLU and one key and value head for two query heads."""
    return make_run(
        tmp_path_factory.mktemp("geometry") / "run",
        preset_name="simulator-16d",
        steps=100,
        candidates=1,
        normalization="pre_rms",
        positional_embedding_type="rotary",
        gated_mlp=True,
        act_fn="silu",
        n_key_value_heads=1,
    )


def test_the_estimate_grows_with_the_square_of_the_stimuli_and_counts_every_head():
    cfg = ModelConfig(d_model=16, n_heads=4, d_head=4, n_key_value_heads=2, n_ctx=8, d_vocab=12)
    heads = {"attn.hook_q": 4, "attn.hook_k": 2, "attn.hook_v": 2, "attn.hook_z": 4}
    assert geometry_activations(cfg) == len(hook_names(cfg)) + sum(heads.values()) - 4 + 2 * 3
    small, large = geometry_memory(cfg, 1000, 8), geometry_memory(cfg, 10_000, 8)
    assert large - small > 90 * (small - geometry_memory(cfg, 100, 8)) / 2
    fit = geometry_fit(cfg, 8, small)
    assert geometry_memory(cfg, fit, 8) <= small < geometry_memory(cfg, fit + 1, 8)
    assert fit == 1000
    with pytest.raises(FlatformerError) as err:
        check_geometry_memory(cfg, (10_000, 8), memory=small)
    message = str(err.value)
    assert "\n" not in message and "--stimuli FILE of at most 1,000 prompts" in message
    check_geometry_memory(cfg, (1000, 8), memory=small)  # what fits passes


def test_a_geometry_too_large_for_the_machine_is_refused_in_one_line(llama_run, tmp_path):
    lines = [f"{i % 11} {i // 11 % 11} + {i // 121 % 11}" for i in range(60_000)]
    (tmp_path / "stimuli.txt").write_text("\n".join(lines) + "\n")
    result = cli_here("geometry", llama_run, "--stimuli", tmp_path / "stimuli.txt")
    assert_one_line_error(result, "geometry on 60,000 stimuli", "--stimuli FILE of at most")


def test_the_newer_architectures_activations_are_measured(llama_run):
    result = cli_here("geometry", llama_run, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    names = report["activations"]
    assert "blocks.0.attn.hook_rot_q.h1" in names and "blocks.0.mlp.hook_pre_linear" in names
    assert "hook_pos_embed" not in names and "blocks.0.attn.hook_k.h1" not in names


def test_stimuli_read_a_few_at_a_time_give_the_numbers_of_one_pass(llama_run, monkeypatch):
    """A long context's stimuli run a few a pass, keeping only their read positions: the same
    representations as every stimulus at once."""
    import numpy as np

    from flatformer.rsa.stimuli import representations
    from flatformer.store.runs import load_run

    model = load_run(llama_run).model()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.cfg.d_vocab, (7, model.cfg.n_ctx))
    read = rng.integers(0, model.cfg.n_ctx, 7)
    whole = representations(model, tokens, read)
    monkeypatch.setattr("flatformer.store.resources.rows_per_pass", lambda cfg, width: 2)
    parts = representations(model, tokens, read)
    assert list(parts) == list(whole)
    for name in whole:
        np.testing.assert_allclose(parts[name], whole[name], rtol=0, atol=1e-12)


def test_the_default_stimuli_narrowed_to_the_time_budget_and_said(llama_run, monkeypatch):
    """Past its budget a geometry takes the first held-out windows that fit, says so, and
    says its estimate before it starts."""
    from flatformer.rsa import budget, report
    from flatformer.rsa.stimuli import stimuli
    from flatformer.store.runs import load_run

    run = load_run(llama_run)
    tokens, _, _ = stimuli(run)
    n, width = tokens.shape
    assert n > 40
    monkeypatch.setattr(budget, "BUDGET_SECONDS", budget.geometry_seconds(run.cfg, 40, width))
    monkeypatch.setattr(report, "LONG_SECONDS", 0.0)
    fit = budget.affordable_stimuli(run.cfg, n, width)
    assert budget.MIN_STIMULI <= fit <= 40
    result = cli_here("geometry", llama_run, "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["stimuli"]) == fit
    assert f"the first {fit} of {n} held-out windows" in result.stderr
    assert f"on {fit} stimuli of {width} tokens, about" in result.stderr


def test_the_time_estimate_grows_with_the_passes_and_the_stimuli():
    from flatformer.rsa.budget import compare_seconds, forward_seconds, geometry_seconds

    cfg = ModelConfig(d_model=64, n_heads=4, d_head=16, n_layers=2, d_mlp=256, n_ctx=64)
    one = geometry_seconds(cfg, 96, 64)
    assert geometry_seconds(cfg, 96, 64, passes=10) - one == pytest.approx(
        9 * forward_seconds(cfg, 96, 64)
    )
    # the comparisons grow faster than the stimuli: tau-a sorts their pairs
    assert compare_seconds(cfg, 192) > 4 * compare_seconds(cfg, 96)


def test_a_seed_folder_too_large_for_the_machine_names_the_seeds_that_fit():
    cfg = ModelConfig(d_model=16, n_heads=4, d_head=4, n_ctx=8, d_vocab=12)
    three = geometry_memory(cfg, 96, 8, 3)
    with pytest.raises(FlatformerError) as err:
        check_geometry_memory(cfg, (96, 8), 50, memory=three, seeds=True)
    message = str(err.value)
    assert "\n" not in message and "geometry of 50 seeds" in message
    assert "a folder of at most 3 seeds" in message
