"""The dtype a training run uses when its recipe does not name one (Recipe.dtype "auto"), by the
measured size curve (bench/results/train_speed.md).

float64 is the reference: every implementation agrees with it to 1e-9, and the compiled path
(engine/kernels/) trains in it, the fastest engine for the small models (the presets: up to
d_model 32, a few hundred positions a step). As a step's work grows the compiled loops fall
behind NumPy's matrix products, and float32's products run at twice float64's speed: from a few
million parameter-positions a step, float32 on the NumPy engine is the fastest engine measured,
and faster than eager PyTorch float32 with one thread.
"""

from __future__ import annotations

from ..config import ModelConfig

# Below this many parameters x positions a step (a step's multiply-adds are about 6x that), a
# model trains in float64. Every preset's default run lies below it, so its checkpoints are
# bit for bit as before (the largest: attn-only-2l at induction, 8,232 parameters x 8 windows
# of 48 = 3.2M, where the compiled path and NumPy float32 are within 10%, the bench's
# attn-only-2l row); the size curve's 30k-parameter model at 4 windows of 32 (3.9M) already
# trains three times faster in float32 than compiled.
FLOAT32_WORK = 3_500_000
# And from this many parameters whatever the batch (every preset at its tasks lies below it but
# grokking-1l at two-layer tasks, already float32), for a full-batch recipe, whose positions a
# step the dataset sets, too.
FLOAT32_FROM = 100_000


def work(cfg: ModelConfig, recipe=None) -> int | None:
    """Parameters x positions in one step of `recipe` (None: unknown, as for a full batch)."""
    if recipe is None or recipe.full_batch:
        return None
    return cfg.n_params * recipe.batch_size * cfg.n_ctx


def default_dtype(cfg: ModelConfig, recipe=None) -> str:
    """float32 from FLOAT32_WORK parameter-positions a step of `recipe` or FLOAT32_FROM
    parameters, else float64 (and there the compiled path where it trains the model).

    >>> from flatformer.config import preset
    >>> from flatformer.training.recipes import get_recipe
    >>> default_dtype(preset("paper-2d", 12)), default_dtype(preset("grokking-1l", 54))
    ('float64', 'float64')
    >>> default_dtype(preset("grokking-1l", 54, n_layers=2, d_model=96, d_head=24))
    'float32'
    >>> big = preset("simulator-16d", 64, d_model=32, n_layers=2, d_mlp=128, n_ctx=32)
    >>> [default_dtype(big, get_recipe("default", batch_size=b)) for b in (2, 8)]
    ['float64', 'float32']
    """
    steps = work(cfg, recipe)
    if cfg.n_params >= FLOAT32_FROM or (steps is not None and steps >= FLOAT32_WORK):
        return "float32"
    return "float64"
