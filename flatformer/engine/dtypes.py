"""The dtype a training run uses when its recipe does not name one (Recipe.dtype "auto").

float64 is the reference: every implementation agrees with it to 1e-9, and the compiled path
(engine/kernels/) trains in it. Where that path does not run, NumPy's float32 matrix products are
twice float64's speed, and eager PyTorch, the yardstick, trains in float32: there a float64
step is slower than PyTorch's (bench/results/train_speed.md, the "numpy f64" and "torch f32"
columns from d32 2L up), a float32 step about as fast or faster ("numpy f32").
"""

from __future__ import annotations

from ..config import ModelConfig
from . import kernels

# Below this many parameters a model trains in float64: every preset at its tasks (the largest,
# grokking-1l at modular-addition, 57k, whose grokking recipe names float32 itself) keeps the
# reference's exact arithmetic and its checkpoints. Between them and this floor the default trades speed for exactness (the size
# curve's d48 row: float64 NumPy behind PyTorch); from it on float32 runs, at or above
# PyTorch's speed (the d64 to d128 rows, bench/results/train_speed.md).
FLOAT32_FROM = 100_000


def default_dtype(cfg: ModelConfig) -> str:
    """float64 where the compiled path trains the model or the model is small, else float32.

    >>> from flatformer.config import preset
    >>> default_dtype(preset("paper-2d", 12)), default_dtype(preset("grokking-1l", 54))
    ('float64', 'float64')
    >>> default_dtype(preset("grokking-1l", 54, n_layers=2, d_model=96, d_head=24))
    'float32'
    """
    if kernels.preferred(cfg, "float64") or cfg.n_params < FLOAT32_FROM:
        return "float64"
    return "float32"
