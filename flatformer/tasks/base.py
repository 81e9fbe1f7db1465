"""What every task is: a vocabulary, a sequence generator and a rule the model should learn."""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError


class Task:
    """A next-token task. Subclasses set the class attributes and write `sample` and `rule`.

    `rule(seq)` returns two int arrays as long as `seq`: `target[j]`, the token the rule forces at
    position j (-1 where anything may follow), and `source[j]`, the earliest position the target
    depends on. A model whose context window does not reach `source[j]` cannot know the target, so
    the rule error skips such positions, and the default recipe drops them from the loss.
    """

    name: str = ""
    vocab: list[str] = []
    default_preset: str = "paper-2d"
    focus: str = ""            # the token whose query the figures focus on
    demo: str = ""             # a sequence the figures trace
    n_sequences: int = 2000
    n_held_out: int = 200
    min_len: int = 20
    max_len: int = 50
    measured: str = ""         # rule error measured with the default preset and recipe

    def sample(self, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    def rule(self, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def split(self, data_seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The fixed training and held-out sequences: the last `n_held_out` are held out."""
        rng = np.random.default_rng(data_seed)
        seqs = [np.asarray(self.sample(rng), dtype=np.int64) for _ in range(self.n_sequences)]
        return seqs[:-self.n_held_out], seqs[-self.n_held_out:]

    def encode(self, text: str) -> list[int]:
        """Tokens from a space-separated string, refusing anything outside the vocabulary."""
        index = {tok: i for i, tok in enumerate(self.vocab)}
        tokens = []
        for word in text.split():
            if word not in index:
                shown = word if len(word) <= 40 else word[:40] + "..."
                raise FlatformerError(f"token {shown!r} is not in the vocabulary of {self.name} "
                                      f"({' '.join(self.vocab[:30])})")
            tokens.append(index[word])
        return tokens

    def decode(self, tokens) -> str:
        return " ".join(self.vocab[int(t)] for t in tokens)

    def describe(self) -> str:
        """The first paragraph of the docstring."""
        return (self.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def recent_target(seq: np.ndarray, marker: int, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rule` for "after `marker`, the most recent earlier token in `wanted`".

    The returned source is that token's position; positions with no such token are unconstrained.
    """
    target = np.full(len(seq), -1)
    source = np.full(len(seq), -1)
    last = -1
    for j in range(len(seq) - 1):
        if seq[j] == marker and last >= 0:
            target[j + 1], source[j + 1] = seq[last], last
        if wanted[seq[j]]:
            last = j
    return target, source
