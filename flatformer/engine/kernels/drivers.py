"""The kernels' Python side: the arrays they take, built from Params, an optim.AdamW, a
data.Corpus or data.TaskData; the seeds split over a pool of threads; and whether a first run
compiles."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from .tensors import layout, numba

if numba is not None:
    from .entries import AdamSteps, HeldOut, Text, evaluate_kernel, gradients, logits_kernel
    from .entries import train_chunk
    from .intrinsics import in_cache


def compile_estimate() -> str:
    """About how long a cold start compiles, in words: an estimate, not one machine's seconds
    (bench/first_run.py measures it; machines differ by two times and more). With two cores,
    training's kernel compiles beside the evaluation's (compile_beside): on one, about twice
    as long."""
    return "usually under half a minute" if threads() >= 2 else "usually under a minute"


def cold() -> bool:
    """Whether training would compile first: the cache holds no machine code for the training
    or evaluation kernel (a fresh install, an empty NUMBA_CACHE_DIR, or a file of this package
    changed: the kernels' stamp, intrinsics.STAMP, then differs from the index's). Reads the
    index numba itself reads; compiles nothing."""
    if numba is None:
        return False
    for kernel in (train_chunk, evaluate_kernel):
        if kernel.signatures:  # compiled already in this process
            continue
        found = in_cache(kernel)
        if found is None:  # numba's internals moved: say nothing rather than fail
            return False
        if not found:
            return True
    return False


_beside: dict = {}  # this process's id -> the process compiling train_chunk beside it

# The second process's program (beside.py), run as `python -c BOOT PACKAGE_PARENT`: the package
# is imported from where the first process imported it, whatever the working folder holds.
BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from flatformer.engine.kernels import beside; beside.main()"
)


def compile_beside():
    """Start compiling the training kernel in a second process, into numba's cache, while this
    one compiles the evaluation's (which the first evaluation, before any step, needs): a cold
    start's two long compiles run on two cores. train_steps waits for it, then loads the kernel
    from the cache; if the other process failed, train_steps compiles it here, as before."""
    if numba is None or _beside or train_chunk.signatures or threads() < 2:
        return
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    argv = [sys.executable, "-c", BOOT, package_parent]
    try:
        _beside[os.getpid()] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:  # no process to spare: train_steps compiles it here
        pass


def _await_beside():
    beside = _beside.pop(os.getpid(), None)  # a forked child's copy is not its own to wait for
    if beside is not None:
        beside.wait()


def threads() -> int:
    """Threads to split seeds over: the cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@lru_cache(maxsize=1)
def pool(n: int, pid: int) -> ThreadPoolExecutor:
    """One pool of n threads per process (a forked child gets its own: the parent's threads
    do not exist there). Starting threads on every call cost more than a chunk of steps."""
    return ThreadPoolExecutor(n, thread_name_prefix="flatformer-kernels")


def over_seeds(kernel, n_seeds: int, *args):
    """Run kernel(*args, lo, hi) over blocks of seeds on every core (the kernels release the
    GIL). A few blocks per thread, taken in turn, so that a thread slowed by other processes
    holds up less. Each seed's arithmetic is the same whichever thread runs it, and next to
    whichever seeds."""
    n = max(1, min(n_seeds, threads()))
    if n == 1:
        kernel(*args, 0, n_seeds)
        return
    blocks = min(n_seeds, 4 * n)
    bounds = [n_seeds * i // blocks for i in range(blocks + 1)]
    executor = pool(n, os.getpid())
    jobs = [executor.submit(kernel, *args, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    for job in jobs:
        job.result()


def loss_and_gradients(params, tokens, targets, weights):
    """The compiled path's per-seed loss (S,) and gradient (a Params), as model.cross_entropy
    and model.backward would give them."""
    S = params.n_seeds
    loss, grads = np.empty(S), params.like()
    over_seeds(
        gradients,
        S,
        params.flat,
        layout(params.cfg),
        np.ascontiguousarray(tokens, dtype=np.int64),
        np.ascontiguousarray(targets, dtype=np.int64),
        np.ascontiguousarray(weights, dtype=np.float64),
        loss,
        grads.flat,
    )
    return loss, grads


WINDOWS_PER_PASS = 64  # small enough for one seed's activations to stay in the cache


def groups(windows, dtype=np.int64):
    """(W, ...) -> (n_groups, WINDOWS_PER_PASS, ...), the last group padded with zeros."""
    G = WINDOWS_PER_PASS
    padded = np.zeros((-(-len(windows) // G) * G, *windows.shape[1:]), dtype=dtype)
    padded[: len(windows)] = windows
    return padded.reshape(-1, G, *windows.shape[1:])


def logits_at(params, inputs, index=None):
    """As evaluate.logits_at, compiled: (S, W, T, V), or (S, W, V) with `index`."""
    S, (W, T), V = params.n_seeds, inputs.shape, params.cfg.vocab_out
    if index is None:
        out = np.empty((S, W, T * V))
        empty = np.empty((0, 0), np.int64)
        over_seeds(logits_kernel, S, params.flat, layout(params.cfg), groups(inputs), empty, out)
        return out.reshape(S, W, T, V)
    out = np.empty((S, W, V))
    over_seeds(
        logits_kernel, S, params.flat, layout(params.cfg), groups(inputs), groups(index), out
    )
    return out


def evaluate(params, data, with_loss: bool = True):
    """As evaluate.evaluate, compiled: per-seed held-out loss and rule error, each (S,)."""
    S = params.n_seeds
    loss, err = np.full(S, np.nan), np.full(S, np.nan)
    n_val = len(data.val_inputs) if with_loss else 0
    held = HeldOut(
        groups(data.val_inputs),
        groups(data.val_targets),
        groups(data.val_weights, np.float64),
        n_val,
        groups(data.rule_inputs),
        groups(data.rule_index),
        np.ascontiguousarray(data.rule_allowed, dtype=np.bool_),
        len(data.rule_inputs),
    )
    over_seeds(evaluate_kernel, S, params.flat, layout(params.cfg), held, loss, err)
    return loss, err


def train_args(params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum, bad) -> tuple:
    """train_chunk's arguments but the block of seeds, as train_steps passes them (their
    types are the same for every model: beside.py compiles the kernel for them)."""
    b1, b2 = opt.betas
    ts = opt.t + 1 + np.arange(len(lrs))
    adam = AdamSteps(
        np.array([1.0 - lr * opt.weight_decay for lr in lrs]),
        np.array([lr / (1.0 - b1 ** int(t)) for lr, t in zip(lrs, ts)]),
        np.array([math.sqrt(1.0 - b2 ** int(t)) for t in ts]),
        1.0 - b1,
        float(b2),
        1.0 - b2,
        float(opt.eps),
    )
    counted = np.zeros(0, np.bool_) if corpus.counted is None else corpus.counted
    text = Text(
        *(
            np.ascontiguousarray(a, dtype=np.int64)
            for a in (corpus.tokens, corpus.target, corpus.source)
        ),
        np.ascontiguousarray(counted, dtype=np.bool_),
        bool(drop_unseen),
    )
    at = np.ascontiguousarray(starts, dtype=np.int64)
    return params.flat, layout(params.cfg), opt.m, opt.v, text, at, adam, loss_sum, bad


def train_steps(params, opt, corpus, starts, drop_unseen: bool, lrs, loss_sum) -> np.ndarray:
    """K AdamW steps on params and an optim.AdamW, in place, with optim.AdamW's arithmetic:
    step k of seed s on the windows of `corpus` (a data.Corpus) starting at starts[k, s], as
    corpus.windows(starts, n_ctx, drop_unseen) gives them (built in the kernel); lrs (K,).
    Each step's loss is added to loss_sum (S,). Returns per seed the index of the first step
    whose loss was not finite, or -1."""
    bad = np.full(params.n_seeds, -1, dtype=np.int64)
    args = train_args(params, opt, corpus, starts, drop_unseen, lrs, loss_sum, bad)
    _await_beside()
    over_seeds(train_chunk, params.n_seeds, *args)
    opt.t += len(lrs)
    return bad
