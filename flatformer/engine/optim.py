"""AdamW over the flat parameter buffer, with torch.optim.AdamW's exact arithmetic."""

from __future__ import annotations

import math

import numpy as np


class AdamW:
    """Decoupled weight decay and bias-corrected moments, on one flat buffer (updated in place).

    Every parameter is decayed, as torch.optim.AdamW does when given `model.parameters()`.
    """

    def __init__(self, flat: np.ndarray, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.flat, self.betas, self.eps, self.weight_decay = flat, betas, eps, weight_decay
        self.m = np.zeros_like(flat)
        self.v = np.zeros_like(flat)
        self.t = 0
        # scratch for the update's intermediates: no temporaries the size of the model per step
        self._a, self._b = np.empty_like(flat), np.empty_like(flat)

    def step(self, grad: np.ndarray, lr: float):
        b1, b2 = self.betas
        a, b = self._a, self._b
        self.t += 1
        self.flat *= 1.0 - lr * self.weight_decay
        np.subtract(grad, self.m, out=a)  # m += (1 - b1) (grad - m), torch's lerp_
        a *= 1.0 - b1
        self.m += a
        self.v *= b2  # v = b2 v + ((1 - b2) grad) grad
        np.multiply(grad, 1.0 - b2, out=a)
        a *= grad
        self.v += a
        np.sqrt(self.v, out=a)  # denom = sqrt(v) / sqrt(1 - b2^t) + eps
        a /= math.sqrt(1.0 - b2**self.t)
        a += self.eps
        np.multiply(self.m, lr / (1.0 - b1**self.t), out=b)
        b /= a
        self.flat -= b
