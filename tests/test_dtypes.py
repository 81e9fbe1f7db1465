"""The default dtype (Recipe.dtype "auto"): float64 for every preset's run, float32 for models
too big for the compiled path, float64 a flag away."""

import pytest

from flatformer.config import preset
from flatformer.engine.dtypes import FLOAT32_FROM, default_dtype
from flatformer.errors import FlatformerError
from flatformer.training.jobs import JobSpec
from flatformer.tasks import TASKS
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
    assert job.recipe.dtype == "float32" and not job.engine.compiled
    job, _ = JobSpec(
        "tiny-grammar", out_dir=tmp_path / "b", overrides={**BIG, "dtype": "float64"}
    ).build()
    assert job.recipe.dtype == "float64"


def test_bad_dtype_is_one_line():
    with pytest.raises(FlatformerError, match="dtype must be float64, float32 or auto"):
        Recipe(dtype="float16")
