"""The compiled fast path: whole chunks of training steps (forward, hand-written backward,
cross-entropy and AdamW fused) in numba, one seed per task, seeds split over the cores.

model.py stays the readable reference and the oracle; this package computes the same numbers in
another order (to 1e-12, checked in tests). Why numba: a paper-2d step is ~60k floating-point
operations, so NumPy's per-call overhead (~100 small operations) and XLA's poor batching of
2-wide products both cost more than the arithmetic; a compiled loop per seed does not.

Layout. Each seed runs its chunk of steps alone, in private buffers, and the seeds are split
over the cores in blocks (threads; the kernels release the GIL), so a seed's numbers never
depend on how many threads ran or which seeds ran beside it.
Activations are stored feature-major, (features, N) with the N = B * T positions innermost:
every matrix product becomes contiguous multiply-adds over 64 positions, which fills the
vector lanes even at d_model 2. Weight gradients are dot products over positions, written
as reassociating reductions (`linear_back_w`, `dot`) so that they vectorize; their order is
fixed by the compiled code, so reruns are byte-identical.

Covered: any number of layers, heads and sizes, ReLU or GELU (tanh), pre-LayerNorm or none,
attention-only blocks (d_mlp = 0), optional Q/K/V biases, W_O, final LayerNorm and unembedding
bias, fewer output classes than tokens (d_vocab_out), attention causal or both ways (computed
here; training refuses a model that attends both ways, in select.py). Anything else (`supports` says) trains on
the NumPy engine.

The package, bottom up: `tensors` (which models, where each tensor lies), `linking` (how numba
links these kernels, and no others, to their callees), `intrinsics` (the bits numba lacks, the exponential, the
compile options), `primitives` (linear maps, LayerNorm),
`attention`, `mlp`, `passes` (one seed's buffers, forward, loss, backward), `entries` (the
compiled kernels Python calls) and `drivers` (their Python side: arrays, threads).
"""

from __future__ import annotations

from .drivers import (
    WINDOWS_PER_PASS,
    cold,
    compile_beside,
    compile_estimate,
    evaluate,
    groups,
    logits_at,
    loss_and_gradients,
    over_seeds,
    threads,
    train_steps,
)
from .tensors import GLOBAL, KNOWN_FIELDS, LAYER, layout, numba, preferred, supports

if numba is not None:
    from .entries import evaluate_kernel, gradients, logits_kernel, train_chunk, windows
    from .intrinsics import EXACT, FAST, as_float, borrowed, exp, fma

__all__ = [
    "GLOBAL",
    "KNOWN_FIELDS",
    "LAYER",
    "WINDOWS_PER_PASS",
    "cold",
    "compile_beside",
    "compile_estimate",
    "evaluate",
    "groups",
    "layout",
    "logits_at",
    "loss_and_gradients",
    "numba",
    "over_seeds",
    "preferred",
    "supports",
    "threads",
    "train_steps",
]
