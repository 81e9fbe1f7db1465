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

    def step(self, grad: np.ndarray, lr: float):
        b1, b2 = self.betas
        self.t += 1
        self.flat *= 1.0 - lr * self.weight_decay
        self.m += (1.0 - b1) * (grad - self.m)   # torch's lerp_
        self.v *= b2
        self.v += (1.0 - b2) * grad * grad
        denom = np.sqrt(self.v) / math.sqrt(1.0 - b2 ** self.t) + self.eps
        self.flat -= (lr / (1.0 - b1 ** self.t)) * self.m / denom
