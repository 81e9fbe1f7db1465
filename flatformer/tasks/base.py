"""What every task is: a vocabulary, a sequence generator and a rule the model should learn."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
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
    # The number behind `measured`: the median held-out rule error of seeds 0-3 trained with the
    # default preset and recipe (bench/tasks_table.py measures it; a test holds the task to it).
    measured_error: float | None = None
    # Model and recipe settings this task trains with unless the user's --set says otherwise,
    # e.g. {"n_layers": 2} (it needs a second layer) or {"steps": 5000} (it learns sooner).
    defaults: dict = {}

    def sample(self, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    def rule(self, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def allowed(self, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the rule error counts: `mask` (L, V), the tokens the rule allows at each position
        of `seq`, and `source` (L,), the earliest position that decides it (-1 where anything may
        follow). A top prediction outside the mask is an error.

        By default the rule's forced target is the only allowed token; a task whose rule allows
        several next tokens (a grammar) overrides this.
        """
        target, source = self.rule(seq)
        forced = target >= 0
        mask = np.ones((len(seq), len(self.vocab)), dtype=bool)
        mask[forced] = False
        mask[np.flatnonzero(forced), target[forced]] = True
        return mask, np.where(forced, source, -1)

    def corrupt(self, inputs: np.ndarray, index: np.ndarray, rng: np.random.Generator):
        """Corrupted copies of rule windows (W, T) whose prediction is at `index` (W,), for
        resample ablation and path patching: (corrupt inputs, the rule's target in each
        corrupt window). None when the task declares no corruption (the default)."""
        return None

    def check_config(self, cfg) -> None:
        """Raise FlatformerError when the model config cannot serve this task (default: any)."""

    def config_extra(self) -> dict:
        """Entries a run's config.json needs, beside the name, to rebuild this task (default:
        none; the corpus task keeps its text)."""
        return {}

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

    def model_label(self) -> str:
        """The default preset with the model settings of `defaults`, e.g. "simulator-16d,
        n_layers=2"."""
        extra = [f"{k}={v}" for k, v in self.defaults.items()
                 if k in ModelConfig.__dataclass_fields__]
        return ", ".join([self.default_preset, *extra])

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


class MarkerTask(Task):
    """A stream of numbers 0..n_numbers-1 and a marker: the token right after each marker is
    forced by `answer` whenever the answer is defined; every other token is drawn by `draw`.

    Subclasses set the vocabulary (the numbers first, then the symbols) and write `answer`.
    """

    marker: str = "+"
    n_numbers: int = 10
    p_marker: float = 0.3

    def answer(self, prefix: np.ndarray) -> tuple[int, int]:
        """(target, source) for the token after `prefix`, whose last token is the marker;
        (-1, -1) when the rule leaves it free."""
        raise NotImplementedError

    def draw(self, rng: np.random.Generator) -> int:
        """A free token: the marker with probability `p_marker`, else a uniform number."""
        if rng.random() < self.p_marker:
            return self.vocab.index(self.marker)
        return int(rng.integers(self.n_numbers))

    def sample(self, rng):
        length = int(rng.integers(self.min_len, self.max_len + 1))
        marker = self.vocab.index(self.marker)
        seq: list[int] = []
        for _ in range(length):
            forced = self.answer(np.array(seq))[0] if seq and seq[-1] == marker else -1
            seq.append(forced if forced >= 0 else self.draw(rng))
        return seq

    def rule(self, seq):
        seq = np.asarray(seq)
        target, source = np.full(len(seq), -1), np.full(len(seq), -1)
        for j in np.flatnonzero(seq[:-1] == self.vocab.index(self.marker)) + 1:
            target[j], source[j] = self.answer(seq[:j])
        return target, source
