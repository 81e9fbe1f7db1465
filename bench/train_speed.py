"""Training speed at every model size: flatformer's step (the compiled path and the NumPy
engine, in float64 and float32; float32's elementwise work runs compiled, fused.py) against the
same model in a plain eager PyTorch float32 loop, the achieved GFLOP/s next to a large matrix
product's GFLOP/s, all measured in this process.

    python bench/train_speed.py [--quick] [--end-to-end]

Each time is the best of a few repeats (the least disturbed by other processes), the engines
of one model taking turns so that a change in the machine's load hits them alike. A step's
floating-point operations are counted as 3x the forward pass's multiply-adds x 2 (backward
about twice the forward), with attention over the full T x T scores as PyTorch computes it.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

# One BLAS thread, like torch below: on a shared 2-core machine a second OpenBLAS thread made the
# 110k model's NumPy step 9x slower (the compiled path splits seeds over the cores itself).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from flatformer import kernels  # noqa: E402
from flatformer.bridge import TorchTransformer  # noqa: E402
from flatformer.config import preset  # noqa: E402
from flatformer.data import Corpus  # noqa: E402
from flatformer.model import (backward, cross_entropy, forward, init_params,  # noqa: E402
                              keep_freed_memory)
from flatformer.optim import AdamW  # noqa: E402

torch.set_num_threads(1)  # on this 2-core machine two threads made a tiny step up to 50x slower

# name, config, sequences per batch, seeds batched
MODELS = [
    ("paper-2d", preset("paper-2d", 12), 8, 1),
    ("paper-2d x64 seeds", preset("paper-2d", 12), 8, 64),
    ("simulator-16d", preset("simulator-16d", 28), 8, 1),
    ("d64 2L 4h ctx32", preset("simulator-16d", 64, d_model=64, n_heads=4, d_head=16,
                               n_layers=2, d_mlp=256, n_ctx=32), 32, 1),
    ("d128 2L 4h ctx64", preset("simulator-16d", 128, d_model=128, n_heads=4, d_head=32,
                                n_layers=2, d_mlp=512, n_ctx=64), 64, 1),
]


def step_flops(cfg, batch):
    N, d, hd, T = batch * cfg.n_ctx, cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_ctx
    per_layer = N * (3 * d * hd + (hd * d if cfg.attn_out else 0) + 2 * d * cfg.d_mlp) \
        + 2 * batch * cfg.n_heads * T * T * cfg.d_head
    return 3 * 2 * (cfg.n_layers * per_layer + N * d * cfg.d_vocab)


def best_of(run, repeats):
    return best_of_each([run], repeats)[0]


def best_of_each(runs, repeats):
    """Each run's best time, the runs taking turns, so that a change in the machine's load
    hits them alike."""
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, t in zip(runs, times):
            start = time.perf_counter()
            run()
            t.append(time.perf_counter() - start)
    return [min(t) for t in times]


def batches(cfg, batch, seeds, steps, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.d_vocab, (steps, seeds, batch, cfg.n_ctx))
    return tokens, rng.integers(0, cfg.d_vocab, tokens.shape), np.ones(tokens.shape)


def compiled_steps(cfg, batch, seeds, steps):
    """A function running `steps` compiled steps (loaded or compiled first); the kernel builds
    each step's windows from a corpus itself, as in training."""
    params = init_params(cfg, [np.random.default_rng(s) for s in range(seeds)])
    rng, n = np.random.default_rng(0), 4096
    corpus = Corpus(rng.integers(0, cfg.d_vocab, n), np.full(n, -1), np.full(n, -1),
                    np.array([0]), np.array([n]))
    starts = rng.integers(0, n - cfg.n_ctx - 1, (steps, seeds, batch))
    opt, loss = AdamW(params.flat), np.zeros(seeds)
    kernels.train_steps(params, opt, corpus, starts[:1], False, [1e-3], loss)  # load/compile
    return lambda: kernels.train_steps(params, opt, corpus, starts, False, [1e-3] * steps,
                                       loss)


def numpy_steps(cfg, batch, seeds, steps, dtype=np.float64):
    """A function running `steps` NumPy engine steps (run once first)."""
    keep_freed_memory()   # as the trainer does
    params = init_params(cfg, [np.random.default_rng(s) for s in range(seeds)])
    params = params.like(params.flat.astype(dtype))
    opt = AdamW(params.flat)
    tokens, targets, weights = batches(cfg, batch, seeds, steps)
    weights = weights.astype(dtype)

    def run():
        for k in range(steps):
            logits, cache = forward(params, tokens[k])
            _, dlogits = cross_entropy(logits, targets[k], weights[k])
            opt.step(backward(params, cache, dlogits).flat, 1e-3)
    run()
    return run


def torch_steps(cfg, batch, steps):
    """A function running `steps` eager PyTorch float32 steps (run once first)."""
    params = init_params(cfg, [np.random.default_rng(0)])
    model = TorchTransformer(cfg, params.seed(0), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens, targets, _ = (torch.from_numpy(a[:, 0]) for a in batches(cfg, batch, 1, steps))

    def run():
        for k in range(steps):
            opt.zero_grad()
            logits = model(tokens[k])
            torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.d_vocab),
                                              targets[k].reshape(-1)).backward()
            opt.step()
    run()
    return run


def matmul_peak(dtype):
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(dtype)
    a @ a
    return 2 * 1024 ** 3 / best_of(lambda: a @ a, 5) / 1e9


def end_to_end(args):
    """Wall time of `flatformer train plus-last-even` (1 seed, then 64) in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        for extra in ([], ["--seeds", "0-63"]):
            cmd = [sys.executable, "-m", "flatformer", "train", "plus-last-even", "--out",
                   f"{tmp}/run{len(extra)}", *extra]
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            print(f"flatformer train plus-last-even {' '.join(extra):<14} "
                  f"{time.perf_counter() - start:6.1f} s end to end")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--end-to-end", action="store_true",
                        help="also time `flatformer train plus-last-even` (1 and 64 seeds) "
                             "against 20,000 eager PyTorch steps")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    peak64, peak32 = matmul_peak(np.float64), matmul_peak(np.float32)
    print(f"matrix product 1024^3 on one core: {peak64:.1f} GFLOP/s float64, "
          f"{peak32:.1f} GFLOP/s float32")
    print(f"{'model':<20}{'params':>8}{'compiled':>11}{'numpy f64':>11}{'numpy f32':>11}"
          f"{'torch f32':>11}{'best/torch':>12}{'GFLOP/s':>9}")
    for name, cfg, batch, seeds in MODELS:
        small = cfg.d_model <= 16
        steps, reps = ((max(2, 200 // (1 + 3 * args.quick)), repeats) if small
                       else (1, 4 * repeats))
        runs = [numpy_steps(cfg, batch, seeds, steps),
                numpy_steps(cfg, batch, seeds, steps, np.float32), torch_steps(cfg, batch, steps)]
        if cfg.d_model <= 64:                         # the d128 step takes ~10 s compiled
            runs.append(compiled_steps(cfg, batch, seeds, steps * (5 if small else 1)))
        times = best_of_each(runs, reps)
        slow64, slow32 = times[0] / steps / seeds, times[1] / steps / seeds
        eager = times[2] / steps
        fast = times[3] / (steps * (5 if small else 1)) / seeds if len(times) > 3 else float("inf")
        best = min(fast, slow64, slow32)
        print(f"{name:<20}{cfg.n_params:>8}{fast * 1e3:>9.3f}ms{slow64 * 1e3:>9.3f}ms"
              f"{slow32 * 1e3:>9.3f}ms{eager * 1e3:>9.3f}ms{eager / best:>11.2f}x"
              f"{step_flops(cfg, batch) / best / 1e9:>9.2f}")
    print("(per seed-step for batched seeds; the x64 row uses both cores, the others one)")
    if args.end_to_end:
        cfg = preset("paper-2d", 12)
        eager = best_of(torch_steps(cfg, 8, 200), 3) / 200
        print(f"20,000 eager PyTorch steps of paper-2d: {eager * 2e4:.1f} s")
        end_to_end(args)


if __name__ == "__main__":
    main()
