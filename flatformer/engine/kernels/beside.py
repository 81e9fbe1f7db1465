"""The second process of drivers.compile_beside: compile the training kernel for the argument
types training passes it (`train_types`) into numba's cache, and exit.

The backward pass first: the first process is compiling the evaluation's kernel meanwhile,
with the forward pass in it. When the backward pass is done, this one waits for the forward
pass to reach the cache (FORWARD_WAIT at most), so that train_chunk loads it rather than
compiling it a second time on the core the first process is using."""

import time
from types import SimpleNamespace

import numba
import numpy as np

from ...config import ModelConfig
from .drivers import train_args
from .entries import train_chunk
from .intrinsics import in_cache
from .passes import backward_seed, buffers, forward_seed

FORWARD_WAIT = 60.0  # s: the first process's whole compile, with room; then compile it here


def example_args() -> tuple:
    """train_chunk's arguments, as drivers.train_steps builds them, for a small model: their
    types are the same for every model, so a second process can compile the kernel before
    the first step's arguments exist (a test checks that a run compiles no other)."""
    f, i = np.zeros(1), np.zeros(1, np.int64)
    params = SimpleNamespace(flat=f, cfg=ModelConfig())
    opt = SimpleNamespace(betas=(0.9, 0.999), t=0, weight_decay=0.0, eps=1e-8, m=f, v=f)
    corpus = SimpleNamespace(tokens=i, target=i, source=i, counted=None)
    starts = np.zeros((1, 1, 1), np.int64)
    return (*train_args(params, opt, corpus, starts, False, [1e-3], f, i), 0, 0)


def train_types() -> tuple:
    """numba's types of train_chunk's arguments in training (lo and hi included)."""
    return tuple(numba.typeof(a) for a in example_args())


def main():
    args = example_args()
    model = args[1]
    p, glob, lay, dims = (numba.typeof(a) for a in (args[0], model.glob, model.lay, model.dims))
    tokens = numba.types.Array(numba.int64, 2, "C")
    # A Buffers of arrays (built by buffers' Python function) has the type of the kernels' own.
    bufs = numba.typeof(buffers.py_func(model.dims, 1, 1, 1))
    backward_seed.compile((p, p, tokens, glob, lay, dims, numba.int64, numba.int64, bufs))
    await_cached(forward_seed)
    train_chunk.compile(train_types())


def await_cached(kernel, timeout: float = FORWARD_WAIT):
    """Return once numba's cache holds machine code for `kernel` (the index numba reads), or
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if in_cache(kernel) is not False:  # None: numba's internals moved; compile it here
            return
        time.sleep(0.05)
