"""The default dtype (Recipe.dtype "auto"): float64 for every preset's run, float32 for models
too big for the compiled path, float64 a flag away."""

import pytest

from flatformer.config import preset
from flatformer.config import PRESETS
from flatformer.engine.dtypes import FLOAT32_FROM, FLOAT32_WORK, default_dtype, work
from flatformer.errors import FlatformerError
from flatformer.training.jobs import JobSpec
from flatformer.tasks import TASKS
from flatformer.training.recipes import get_recipe
from flatformer.training.trainer import Recipe

BIG = dict(d_model=64, n_heads=4, d_head=16, n_layers=2, d_mlp=256, n_ctx=32)


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_default_run_keeps_its_dtype(task, tmp_path):
    job, _ = JobSpec(task, out_dir=tmp_path / "run").build()
    # the grokking recipe names float32; every other default run trains in float64 as before
    assert job.recipe.dtype == (
        "float32" if job.config_extra["recipe_name"] == "grokking" else "float64"
    )
    assert job.run_config(0)["recipe"]["dtype"] == job.recipe.dtype


def test_presets_stay_float64_and_big_models_take_float32(tmp_path):
    for name in ("paper-2d", "simulator-16d", "attn-only-2l", "grokking-1l", "small-4d-2head"):
        assert default_dtype(preset(name, 54)) == "float64"
    big = preset("simulator-16d", 64, **BIG)
    assert big.n_params >= FLOAT32_FROM and default_dtype(big) == "float32"
    job, _ = JobSpec("tiny-grammar", out_dir=tmp_path / "a", overrides=BIG).build()
    assert job.recipe.dtype == "float32" and job.engine.name == "numpy"
    job, _ = JobSpec(
        "tiny-grammar", out_dir=tmp_path / "b", overrides={**BIG, "dtype": "float64"}
    ).build()
    assert job.recipe.dtype == "float64"


def test_bad_dtype_is_one_line():
    with pytest.raises(FlatformerError, match="dtype must be float64, float32 or auto"):
        Recipe(dtype="float16")


def test_every_presets_run_lies_below_the_float32_step_and_keeps_its_dtype(tmp_path):
    """Every preset at every task it trains on, with every named recipe: a float64 run's step
    is below FLOAT32_WORK, so the default keeps its checkpoints bit for bit."""
    seen = 0
    for task in TASKS:
        for name in PRESETS:
            for recipe in ("paper", "default"):
                try:
                    job, _ = JobSpec(task, name, recipe, out_dir=tmp_path / "r").build()
                except FlatformerError:  # a preset the task refuses (modular-addition's n_ctx)
                    continue
                seen += 1
                if job.cfg.n_params < FLOAT32_FROM:
                    assert work(job.cfg, job.recipe) < FLOAT32_WORK, (task, name)
                    assert job.recipe.dtype == "float64", (task, name)
    assert seen > 100


def test_a_30k_to_100k_model_with_a_real_batch_takes_float32(tmp_path):
    """The size curve's 30k and 64k-parameter models (bench/train_speed.py) at its batch of
    32, and at the recipes' 8: float32 on the NumPy engine, its fastest engine there."""
    for d in (32, 48):
        cfg = preset("simulator-16d", 64, **{**BIG, "d_model": d, "d_head": d // 4, "d_mlp": 4 * d})
        assert 30_000 <= cfg.n_params < FLOAT32_FROM
        for batch in (8, 32):
            assert default_dtype(cfg, get_recipe("default", batch_size=batch)) == "float32"
        assert default_dtype(cfg, get_recipe("default", full_batch=True)) == "float64"
    overrides = {**BIG, "d_model": 32, "d_head": 8, "d_mlp": 128}
    job, _ = JobSpec("tiny-grammar", out_dir=tmp_path / "a", overrides=overrides).build()
    assert job.recipe.dtype == "float32" and job.engine.name == "numpy"
