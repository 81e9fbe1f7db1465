import subprocess
import sys
import tempfile

import pytest

try:
    import torch

    torch.set_num_threads(1)  # two threads on this 2-core machine made tiny steps 50x slower
except ImportError:
    torch = None

from extras import (  # the policy for tests that need an extra (see tests/extras.py)
    mark_needs,
    pytest_configure,
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)
from flatformer.config import preset

# pytest finds hooks by name in this module, imported ones included.
__all__ = [
    "pytest_configure",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
]

# The modules `pytest -m "not slow"` leaves out: browsers, movies, notebooks, sweeps, the main
# job, whole-suite figure drawing, task training, bridges to torch/TransformerLens and every
# test that runs the command line in a subprocess. What stays (engine, tasks, readout, analysis,
# export, compare on hand-made weights) is the fast loop the README describes.
SLOW = {
    "test_analysis_cli",
    "test_atlas",
    "test_atlas_browser",
    "test_bridge_lens",
    "test_cli",
    "test_compare_command",
    "test_edges",
    "test_dashboards_browser",
    "test_explorer_browser",
    "test_explorer_capture",
    "test_explorer_hostile",
    "test_first_run",
    "test_figures_cli",
    "test_figures_draw",
    "test_figures_labels",
    "test_grammar_floor",
    "test_kernels",
    "test_max_steps",
    "test_movies",
    "test_notebook",
    "test_notebook_tour",
    "test_import_browser",
    "test_import_cli",
    "test_pages_fit",
    "test_playground_browser",
    "test_readme",
    "test_docs",
    "test_reproduce",
    "test_sweep",
    "test_sweep_cli",
    "test_tasks_corpus",
    "test_tasks_train",
    "test_train",
}


# Single slow tests of modules the fast loop keeps. Each spends seconds of CPU on the command line
# run in a subprocess over a freshly trained run, on every figure of a command, on Chromium or on
# importing TransformerLens: together about 57 of the loop's 102 s of CPU (measured with the
# numba cache warm). The full suite runs them.
SLOW_TESTS = {
    "test_analysis_induction": {
        "test_analyze_json_reports_the_induction_block",
        "test_the_phase_figure_and_the_movie",
        "test_scores_equal_transformer_lens",
    },
    "test_geometry": {
        "test_data_recovers_a_planted_activation_and_a_shuffled_control_is_null",
        "test_figures_are_written",
        "test_against_itself_equals_its_own_cka_and_hdf5_export_reads_back",
    },
    "test_grokking": {"test_the_explorer_colours_numbers_by_their_key_phase"},
    "test_import_tokenizer": {
        "test_figures_draw_on_the_held_out_text",
        "test_the_page_checks_itself_and_its_input_box_reads_the_pieces",
    },
    "test_linking": {
        "test_after_training_numba_is_numbas_own_and_a_users_kernel_compiles_as_without_flatformer"
    },
    "test_playground": {"test_playground_command_writes_one_offline_page"},
    "test_tasks": {"test_analyze_default_prompts_cover_an_ordered_held_out_set"},
    "test_views_architectures_draw": {
        "test_every_figure_is_drawn_or_skipped_with_a_reason",
        "test_every_movie_is_written_or_skipped_with_a_reason",
    },
}


def pytest_sessionstart(session):
    """Under xdist, fill numba's cache once before the workers start (this hook runs before
    xdist's own): otherwise every worker's first fixture compiles the same kernels at once.
    A short training run compiles what most tests use (training beside evaluation, on two
    cores); a failure here is left to the tests that meet it."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "flatformer", "train", "plus-last-even", "--steps", "100"]
            + ["--out", f"{tmp}/warm"],
            capture_output=True,
            timeout=600,
        )


def pytest_collection_modifyitems(items):
    for item in items:
        name = item.module.__name__
        if name in SLOW or getattr(item, "originalname", None) in SLOW_TESTS.get(name, ()):
            item.add_marker(pytest.mark.slow)
    mark_needs(items)
    for module in {item.module for item in items}:
        stale = SLOW_TESTS.get(module.__name__, set()) - set(vars(module))
        if stale:
            raise pytest.UsageError(
                f"conftest SLOW_TESTS names no test of {module.__name__}: {stale}"
            )


CONFIGS = {
    "paper-2d": preset("paper-2d", 12),
    "simulator-16d": preset("simulator-16d", 28),
    "2-layer": preset("paper-2d-2layer", 12),
    "2-layer-ln-bias": preset("simulator-16d", 20, n_layers=2, qkv_bias=True, unembed_bias=True),
    # Attention-only blocks, a final LayerNorm and a 32-token context (induction's model family).
    "attn-only-ln-final": preset("simulator-16d", 12, n_layers=2, d_mlp=0, ln_final=True, n_ctx=32),
    # An imported model's features: b_O, the exact (erf) GELU, fewer outputs than inputs.
    "imported-features": preset(
        "simulator-16d",
        14,
        n_layers=2,
        attn_out_bias=True,
        act_fn="gelu_erf",
        d_vocab_out=11,
        ln_final=True,
    ),
    # Zhong et al.'s attention rate: learned attention mixed with uniform (attn_coeff), two
    # layers of two heads with W_O and pre-LayerNorm.
    "attention-rate": preset("simulator-16d", 12, n_layers=2, qkv_bias=True, attn_coeff=0.3),
}


@pytest.fixture(params=list(CONFIGS))
def cfg(request):
    return CONFIGS[request.param]


def random_model(cfg, seed: int = 0, perturb: bool = True):
    """A model with random weights (`init_params` from `seed`); with `perturb`, LayerNorm gains
    and every bias moved off 1 and 0 (from seed + 1) so that they matter in a comparison."""
    import numpy as np

    from flatformer.engine.model import init_params
    from flatformer.model.transformer import Transformer

    params = init_params(cfg, [np.random.default_rng(seed)])
    if perturb:
        rng = np.random.default_rng(seed + 1)
        for name, view in params.views.items():
            if "ln" in name or ".b_" in name:
                view += 0.3 * rng.standard_normal(view.shape)
    return Transformer(cfg, params.seed(0))


def make_run(folder, task="plus-last-even", preset_name=None, recipe="default", seeds=None, **sets):
    """Train a run into `folder` (one seed, or a --seeds folder "A-B") and return its path."""
    from flatformer.training.jobs import JobSpec, parse_seeds
    from flatformer.training.trainer import train

    seed_list = parse_seeds(seeds)
    job, out = JobSpec(
        task,
        preset_name,
        recipe,
        seeds=tuple(seed_list) if seed_list else None,
        out_dir=folder,
        overrides=sets,
    ).build()
    train(job)
    return out


@pytest.fixture(scope="session")
def paper_run(tmp_path_factory):
    """The paper's model trained with the default recipe (20,000 steps, about 5 s)."""
    return make_run(tmp_path_factory.mktemp("paper") / "run")


@pytest.fixture(scope="session")
def simulator_run(tmp_path_factory):
    """A simulator-16d model (LayerNorm, GELU, two heads, W_O), briefly trained."""
    return make_run(
        tmp_path_factory.mktemp("sim") / "run",
        preset_name="simulator-16d",
        steps=1000,
        candidates=1,
    )


@pytest.fixture(scope="session")
def two_layer_run(tmp_path_factory):
    """A 2-layer plane model, briefly trained."""
    return make_run(
        tmp_path_factory.mktemp("two") / "run",
        preset_name="paper-2d-2layer",
        steps=1000,
        candidates=1,
    )


@pytest.fixture(scope="session")
def induction_run(tmp_path_factory):
    """The induction task on attn-only-2l with two heads of 8 per layer (so composition has
    pairs to compare), briefly trained (4 checkpoints; the heads have not formed)."""
    return make_run(
        tmp_path_factory.mktemp("induction") / "run",
        task="induction",
        steps=300,
        eval_every=100,
        n_heads=2,
        d_head=8,
    )


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium, launched once for the session and shared by every browser test
    (Playwright's sync API allows one running instance per thread)."""
    from browser import close_shared_browser, shared_browser

    yield shared_browser()
    close_shared_browser()


# A small modular-addition model (p = 13) briefly trained full-batch: it memorises, it does not
# grok (that takes minutes; bench/grokking.py measures it).
GROKKING_SETS = dict(p=13, train_fraction=0.3, d_model=16, d_head=4, d_mlp=32, steps=400)


@pytest.fixture(scope="session")
def grokking_run(tmp_path_factory):
    return make_run(
        tmp_path_factory.mktemp("grok") / "run",
        task="modular-addition",
        recipe="grokking",
        **GROKKING_SETS,
    )


@pytest.fixture(scope="session")
def grokking_seeds(tmp_path_factory):
    return make_run(
        tmp_path_factory.mktemp("grok-seeds") / "runs",
        task="modular-addition",
        recipe="grokking",
        seeds="0-2",
        **GROKKING_SETS,
    )


# Plane (d_model 2) runs of the newer architectures, whose every figure and movie is drawn
# (test_views_architectures_draw.py) and whose views are held to their hooks
# (test_views_architectures.py).
PLANE = dict(d_mlp=8, attn_out=True, ln_final=True)
RUNS = {
    # Llama-like: RMSNorm, rotary, SwiGLU, two query heads sharing one key and value head
    "llama": dict(
        PLANE, normalization="pre_rms", eps=1e-6, positional_embedding_type="rotary",
        gated_mlp=True, act_fn="silu", n_heads=2, d_head=2, n_key_value_heads=1,
        unembed_bias=False,
    ),
    # GPT-NeoX-like: LayerNorm, rotary, attention and the MLP in parallel
    "neox": dict(
        PLANE, normalization="pre_ln", positional_embedding_type="rotary",
        parallel_attn_mlp=True, act_fn="gelu_erf", qkv_bias=True, attn_out_bias=True,
    ),
    # SoLU with its LayerNorm over the neurons
    "solu": dict(PLANE, normalization="pre_ln", act_fn="solu_ln"),
}  # fmt: skip


@pytest.fixture(scope="module", params=list(RUNS))
def plane_run(request, tmp_path_factory):
    """A d_model 2 model of the architecture, 300 steps of the paper's task (4 checkpoints)."""
    folder = tmp_path_factory.mktemp(request.param) / "run"
    return request.param, make_run(
        folder, preset_name="paper-2d", steps=300, candidates=1, **RUNS[request.param]
    )
