"""The induction task's movie: every head's attention pattern on one sequence of random tokens
repeated once, across training, with its previous-token and prefix-matching scores. The
previous-token head's sub-diagonal and the induction head's off-diagonal stripe (each query in
the repeat looking at the token after its earlier occurrence) appear at the phase change."""

from __future__ import annotations

import numpy as np

from ..analysis.induction import attention_scores, repeated_tokens
from .scene import Scene


class InductionMovie(Scene):
    """Movie 7 (induction task): the attention pattern of each head on a repeated sequence."""

    name = "mov7_induction_attention"
    task = "induction"
    height = 560

    def __init__(self, geo):
        super().__init__(geo)
        cfg = self.ck.run.cfg
        self.n_panels = cfg.n_layers * cfg.n_heads
        self.width = 16 * ((60 + 70 + 300 * self.n_panels) // 16 + 1)
        tokens, self.n = repeated_tokens(cfg, n_seqs=1)
        scored, _ = repeated_tokens(cfg)  # the scores average the usual 32 sequences
        self.tokens = tokens
        self.patterns, self.prev, self.prefix = [], [], []
        for model in self.ck.models:
            _, cache = model.run_with_cache(tokens)
            self.patterns.append(
                np.stack(
                    [cache[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(cfg.n_layers)]
                )
            )
            prev, prefix = attention_scores(model, scored)
            self.prev.append(prev)
            self.prefix.append(prefix)

    def note(self):
        return (
            f"{self.n} random tokens repeated once (queries down, keys across);\n"
            f"scores: means over 32 such sequences"
        )

    def frame(self, i):
        return {"patterns": self.patterns[i], "prev": self.prev[i], "prefix": self.prefix[i]}

    def draw(self, panels):
        cfg = self.ck.run.cfg
        T = self.tokens.shape[1]
        self.images, self.labels = [], []
        for j, ax in enumerate(panels):
            layer, h = divmod(j, cfg.n_heads)
            image = ax.imshow(
                np.zeros((T, T)), cmap="Blues", vmin=0, vmax=1, interpolation="nearest"
            )
            ax.set_title(f"head {layer}.{h}", fontsize=10)
            ax.set_xticks([0, self.n - 1, T - 1])
            ax.set_yticks([0, self.n - 1, T - 1])
            ax.tick_params(labelsize=7)
            ax.axhline(self.n - 0.5, color="0.6", lw=0.5)
            ax.axvline(self.n - 0.5, color="0.6", lw=0.5)
            label = ax.text(
                0.5, -0.14, "", transform=ax.transAxes, ha="center", va="top", fontsize=8
            )
            self.images.append(image)
            self.labels.append(label)
        self.canvas.animate(*self.images, *self.labels)

    def move(self, i, a):
        cfg = self.ck.run.cfg
        for j, (image, label) in enumerate(zip(self.images, self.labels)):
            layer, h = divmod(j, cfg.n_heads)
            image.set_data(a["patterns"][layer, h])
            label.set_text(
                f"previous-token {a['prev'][layer, h]:.2f}   "
                f"prefix-matching {a['prefix'][layer, h]:.2f}"
            )
