"""Speed of dictionary training: the same TopK dictionary on the same activations, flatformer's
NumPy trainer against a PyTorch loop written as SAELens users write one, one thread each.

    python bench/dictionary_speed.py [--steps N]

Activations: 16,384 samples of planted features (256 directions in d = 32, true L0 = 4). The
dictionary: TopK, width 256, k 4, batches of 1,024, Adam at 1e-3, decoder rows held at unit
norm with the parallel gradient removed (Gao et al. 2024), AuxK off on both sides (no latent is
declared dead), the data scaled to E||x|| = sqrt(d) once beforehand. PyTorch in float32 (what
users run) and float64 (our precision). Then four widths (64, 128, 256, 512) trained in one
call (each width its own stack, on the same batches) against four PyTorch loops. Each time is
the best of 3 (the least disturbed by other processes on shared cores), and includes drawing
the batches on both sides.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread each side
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from common import record  # noqa: E402
from flatformer.dictionary import Recipe, train_stack  # noqa: E402
from flatformer.dictionary.truth import planted_features  # noqa: E402

D, WIDTH, K, BATCH, LR = 32, 256, 4, 1024, 1e-3


def torch_topk(x: np.ndarray, width: int, steps: int, dtype) -> float:
    """A TopK SAE trained the way SAELens users write the loop; returns seconds."""
    import torch

    torch.manual_seed(0)
    data = torch.tensor(x, dtype=dtype)
    W_dec = torch.randn(width, x.shape[1], dtype=dtype)
    W_dec /= W_dec.norm(dim=-1, keepdim=True)
    W_dec = torch.nn.Parameter(W_dec)
    W_enc = torch.nn.Parameter(W_dec.detach().T.clone())
    b_enc = torch.nn.Parameter(torch.zeros(width, dtype=dtype))
    b_dec = torch.nn.Parameter(data.mean(0).clone())
    opt = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=LR)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        xb = data[torch.randint(0, len(data), (BATCH,), generator=gen)]
        pre = (xb - b_dec) @ W_enc + b_enc
        v, i = torch.topk(pre, K, dim=-1)
        f = torch.zeros_like(pre).scatter(-1, i, torch.relu(v))
        x_hat = f @ W_dec + b_dec
        loss = (x_hat - xb).pow(2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        with torch.no_grad():
            W_dec.grad -= (W_dec.grad * W_dec).sum(-1, keepdim=True) * W_dec
        opt.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=-1, keepdim=True)
    return time.perf_counter() - start


def ours(x: np.ndarray, widths, steps: int) -> float:
    recipe = Recipe(steps=steps, batch=BATCH, lr=LR, dead_tokens=10**15)
    start = time.perf_counter()
    train_stack("topk", x, None, widths, [K] * len(widths), None, recipe)
    return time.perf_counter() - start


def best(fn, repeats=3) -> float:
    return min(fn() for _ in range(repeats))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    x = planted_features(256, D, 16_384, 4, seed=0).x
    x = x * np.sqrt(D) / np.linalg.norm(x, axis=1).mean()
    steps = args.steps
    widths = [64, 128, 256, 512]
    with record(__file__, "Dictionary training speed", markdown=True):
        ours_one = best(lambda: ours(x, [WIDTH], steps))
        t32 = best(lambda: torch_topk(x, WIDTH, steps, torch.float32))
        t64 = best(lambda: torch_topk(x, WIDTH, steps, torch.float64))
        ours_four = best(lambda: ours(x, widths, steps))
        torch_four = best(lambda: sum(torch_topk(x, w, steps, torch.float32) for w in widths))
        ms = 1000 / steps
        print(
            f"TopK, d {D}, width {WIDTH}, k {K}, batch {BATCH}, {steps} Adam steps, one thread; "
            "milliseconds per step (best of 3).\n"
        )
        print("| trainer | ms / step | PyTorch time / ours |")
        print("|---|---|---|")
        print(f"| flatformer (NumPy, float64) | {ours_one * ms:.2f} | 1 |")
        print(f"| PyTorch loop, float32 | {t32 * ms:.2f} | {t32 / ours_one:.2f} |")
        print(f"| PyTorch loop, float64 | {t64 * ms:.2f} | {t64 / ours_one:.2f} |")
        print(
            f"\nWidths {', '.join(map(str, widths))} in one call against four PyTorch "
            f"float32 loops: {ours_four * ms:.2f} against {torch_four * ms:.2f} ms per step, "
            f"ratio {torch_four / ours_four:.2f}."
        )


if __name__ == "__main__":
    main()
