"""The second process of drivers.compile_beside: compile the training kernel for argument types
given as JSON (TRAIN_TYPES) into numba's cache, and exit.

The backward pass first: the first process is compiling the evaluation's kernel meanwhile,
with the forward pass in it. When the backward pass is done, this one waits for the forward
pass to reach the cache (FORWARD_WAIT at most), so that train_chunk loads it rather than
compiling it a second time on the core the first process is using."""

import json
import time

import numba
import numpy as np

from .entries import train_chunk
from .intrinsics import in_cache
from .passes import backward_seed, buffers, forward_seed

FORWARD_WAIT = 60.0  # s: the first process's whole compile, with room; then compile it here

# train_chunk's argument types, as train_steps passes them: (dtype, ndim) for a C-contiguous
# array, (dtype, 0) for a scalar. The same for every model, so a second process can compile it
# before the first step's arguments exist (a test checks that a run compiles no other).
TRAIN_TYPES = (
    *(("float64", 1), ("int64", 1), ("int64", 1), ("int64", 1), ("int64", 2), ("int64", 1)),
    *(("float64", 1), ("float64", 1), ("int64", 1), ("int64", 1), ("int64", 1), ("bool", 1)),
    *(("bool", 0), ("int64", 3), ("float64", 1), ("float64", 1), ("float64", 1)),
    *(("float64", 0), ("float64", 0), ("float64", 0), ("float64", 0)),
    *(("float64", 1), ("int64", 1), ("int64", 0), ("int64", 0)),
)


def signature(spec) -> tuple:
    """numba's argument types for a spec like TRAIN_TYPES."""
    types = numba.types

    def one(dtype, ndim):
        scalar = types.boolean if dtype == "bool" else getattr(types, dtype)
        return types.Array(scalar, ndim, "C") if ndim else scalar

    return tuple(one(dtype, ndim) for dtype, ndim in spec)


# Run by drivers.compile_beside as `python -c BOOT PACKAGE_PARENT SPEC`: the package is imported
# from where the first process imported it, whatever the working folder holds.
BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from flatformer.engine.kernels import beside; beside.main(sys.argv[2])"
)


def main(spec: str):
    types = signature(json.loads(spec))
    p, _, _, glob, lay, dims = types[:6]
    tokens = numba.types.Array(numba.int64, 2, "C")
    # A Buffers of arrays (built by buffers' Python function) has the type of the kernels' own.
    bufs = numba.typeof(buffers.py_func(np.ones(7, np.int64), 1, 1, 1))
    backward_seed.compile((p, p, tokens, glob, lay, dims, numba.int64, numba.int64, bufs))
    await_cached(forward_seed)
    train_chunk.compile(types)


def await_cached(kernel, timeout: float = FORWARD_WAIT):
    """Return once numba's cache holds machine code for `kernel` (the index numba reads), or
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if in_cache(kernel) is not False:  # None: numba's internals moved; compile it here
            return
        time.sleep(0.05)
