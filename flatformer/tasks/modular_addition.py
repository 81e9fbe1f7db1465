"""Grokking's task: `a b =`, then (a + b) mod p, on a fixed fraction of all p^2 pairs."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .base import MarkerTask

MAX_P = 257  # p^2 examples are evaluated at once; beyond this flatformer's engine is too slow


class ModularAddition(MarkerTask):
    """`a b =`, then the sum modulo p: grokking (Power et al. 2022; Nanda et al. 2023).

    Vocabulary: the numbers 0..p-1 and `=` (p + 1 tokens). Every example is the four tokens
    `a b = c` with c = (a + b) mod p; the model reads `a b =` and only its prediction at `=`
    counts, in the loss and in the rule error. A fixed fraction of all p^2 pairs trains (the
    task settings `p`, default 53, and `train_fraction`, default 0.5: --set p=59 --set
    train_fraction=0.4); the other pairs are held out, and the rule error is the held-out top-1
    error. Training is full-batch (the `grokking` recipe): the model memorises its pairs before
    it generalises.

    Example: `30 40 = 17`: 30 + 40 = 70, which is 17 modulo 53.

    Why half the pairs, not the 30% of Nanda et al.: measured at p = 53 (on a loaded machine),
    every variant tried memorised its pairs within 500 steps, but with 30% of the pairs none
    passed 3% held-out accuracy by step 3,500 (an eager-PyTorch replica and this engine; seed 0
    was still at 2.7% after 6,000 float32 steps), too slow for a two-minute run; 35% gave 3.7%
    and 40% 15.5% at step 2,500. With 50% (the `grokking` recipe, float32) seeds 0-4 memorised
    by step 200-400 and passed 99% held out at steps 1,000-2,000 (bench/grokking.py); seed 0
    ends with a held-out error of 0.1% at step 4,000.
    """

    name = "modular-addition"
    marker = "="
    default_preset = "grokking-1l"
    default_recipe = "grokking"
    answer_only = True
    settings = {"p": 53, "train_fraction": 0.5}
    measured = "0.1% at step 4,000 (seed 0)"
    measured_error = None

    def __init__(self, p: int = 53, train_fraction: float = 0.5):
        if not isinstance(p, int) or isinstance(p, bool) or not 3 <= p <= MAX_P:
            raise FlatformerError(
                f"modular-addition: p must be a whole number in 3..{MAX_P}, got {p!r}"
            )
        if (
            not isinstance(train_fraction, (int, float))
            or isinstance(train_fraction, bool)
            or not 0 < train_fraction < 1
        ):
            raise FlatformerError(
                f"modular-addition: train_fraction must be in (0, 1), got {train_fraction!r}"
            )
        self.p, self.train_fraction = p, float(train_fraction)
        self.n_numbers = p
        self.vocab = [str(i) for i in range(p)] + ["="]
        self.focus = "="
        self.demo = f"{p // 2} {p - 3} ="
        self.n_train = int(round(self.train_fraction * p * p))
        if not 1 <= self.n_train < p * p:
            raise FlatformerError(
                f"modular-addition: train_fraction {train_fraction} leaves no "
                f"training or no held-out pair of the {p * p}"
            )

    def check_config(self, cfg) -> None:
        if cfg.n_ctx != 3:
            raise FlatformerError(
                f"modular-addition reads exactly `a b =`: n_ctx must be 3, got {cfg.n_ctx}"
            )

    def example(self, a, b) -> np.ndarray:
        """The sequences `a b = c` for arrays of pairs, (n, 4)."""
        a, b = np.asarray(a), np.asarray(b)
        return np.stack([a, b, np.full_like(a, self.p), (a + b) % self.p], -1)

    def pairs(self, data_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Every pair's index a * p + b: the training ones, then the held-out ones."""
        order = np.random.default_rng([data_seed, self.p]).permutation(self.p * self.p)
        return np.sort(order[: self.n_train]), np.sort(order[self.n_train :])

    def split(self, data_seed: int = 0):
        """A fixed random `train_fraction` of all p^2 pairs trains; the rest is held out."""
        train, held = self.pairs(data_seed)
        return (
            [row for row in self.example(train // self.p, train % self.p)],
            [row for row in self.example(held // self.p, held % self.p)],
        )

    def sample(self, rng):
        a, b = rng.integers(self.p, size=2)
        return self.example(a, b).tolist()

    def answer(self, prefix):
        if len(prefix) >= 3 and prefix[-2] < self.p and prefix[-3] < self.p:
            return int(prefix[-3] + prefix[-2]) % self.p, len(prefix) - 3
        return -1, -1
