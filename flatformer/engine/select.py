"""Which engine computes a job's numbers, decided here and nowhere else: the NumPy reference
or the compiled kernels (engines.py, one interface). A job chooses once (`choose`, called when
the job is built); the trainer, the evaluation and the views hand the chosen Engine on and call
it, never asking which it is, and code given none (a view of a loaded run) asks `for_params`,
which makes the same choice."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import require_causal
from ..errors import FlatformerError
from . import kernels
from .dtypes import default_dtype
from .engines import COMPILED, REFERENCE, Engine

ENGINES = ("auto", "numba", "numpy")


NUMPY = REFERENCE  # the name --engine gives it


def covers(cfg, dtype) -> bool:
    """Whether the compiled kernels compute this model in this dtype (float64 only)."""
    return kernels.supports(cfg) and np.dtype(dtype) == np.float64


def choose(cfg, recipe=None, requested: str = "auto", dtype=None) -> Engine:
    """The engine for a model trained by `recipe` (None: only evaluated), in `dtype` (default:
    the recipe's, else float64), as the user requested: numpy, numba (refused where the
    kernels do not cover the model) or auto, which takes the compiled path where it is the
    faster (kernels.preferred: float64, which the default dtype keeps for small steps only,
    up to d_model 32) except for full-batch recipes: with every window in each step the
    NumPy engine's matrix products win (modular-addition's default model: a NumPy step about
    a third of a compiled one's, and no compile)."""
    if isinstance(requested, Engine):
        return requested
    if requested not in ENGINES:
        raise FlatformerError(f"engine must be one of {', '.join(ENGINES)}, got {requested!r}")
    dtype = dtype or (recipe.dtype if recipe is not None else "float64")
    if dtype == "auto":  # a recipe not yet resolved by its Job
        dtype = default_dtype(cfg, recipe)
    if recipe is not None:
        require_causal(cfg, "training (next-token prediction)")
    if requested == "numpy":
        return NUMPY
    if requested == "numba":
        if not covers(cfg, dtype):
            raise FlatformerError(
                f"the compiled engine does not cover this model in {np.dtype(dtype)} (or numba "
                "is not installed); use --engine numpy"
            )
        return COMPILED
    full_batch = recipe is not None and recipe.full_batch
    return COMPILED if not full_batch and kernels.preferred(cfg, dtype) else NUMPY


def resolve(cfg, recipe, requested: str = "auto"):
    """(recipe, engine) for training `cfg` by `recipe` as the user requested: the recipe with
    its dtype resolved where it says auto (dtypes.default_dtype, by the size of a step), and
    the engine `choose` takes for it. Job calls it once; the benchmark asks it what a run
    would train on."""
    if recipe.dtype == "auto":
        recipe = dataclasses.replace(recipe, dtype=default_dtype(cfg, recipe))
    return recipe, choose(cfg, recipe, requested)


def for_params(params) -> Engine:
    """The engine `auto` chooses to evaluate these weights (model.Params) with."""
    return choose(params.cfg, None, "auto", params.flat.dtype)
