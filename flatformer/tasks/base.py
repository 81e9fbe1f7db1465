"""What every task is: a vocabulary, a sequence generator and a rule the model should learn."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ModelConfig
from ..errors import FlatformerError


LEARNED = 0.01  # a model has learned its task at a held-out rule error of at most 1%


@dataclass(frozen=True)
class Recall:
    """The roles of a task "after `marker`, say the most recent earlier token in `wanted`":
    the marker, the tokens the rule recalls, the other tokens it recalls past, and a name for
    each of the three classes (wanted, other, marker). The analysis measures the five steps of
    the paper's algorithm from these, compare checks which of their structures every seed
    shares, and `Task.corrupt` swaps the recalled token for another wanted one."""

    marker: str
    wanted: tuple[str, ...]
    other: tuple[str, ...]
    names: tuple[str, str, str]  # e.g. ("even", "odd", "+")

    def ids(self, vocab: list[str]) -> tuple[int, list[int], list[int]]:
        """(marker, wanted, other) as token ids of `vocab`."""
        return (
            vocab.index(self.marker),
            [vocab.index(w) for w in self.wanted],
            [vocab.index(o) for o in self.other],
        )

    def mask(self, vocab: list[str]) -> np.ndarray:
        """(V,) bool: which tokens are wanted."""
        m = np.zeros(len(vocab), dtype=bool)
        m[self.ids(vocab)[1]] = True
        return m


def split_word(word: str, vocab) -> list[str] | None:
    """`word` as a run of vocabulary tokens, longest first at each point ("41+46+" -> 4 1 + 4
    6 +, "10+" -> 10 +), or None when it is not one: the spaces a user left out."""
    longest = max(map(len, vocab), default=0)
    out, i = [], 0
    while i < len(word):
        for size in range(min(longest, len(word) - i), 0, -1):
            if word[i : i + size] in vocab:
                out.append(word[i : i + size])
                i += size
                break
        else:
            return None
    return out


HINT_CHARS = 200  # an error line quotes at most this much of a text (a corpus may be megabytes)


def cut(text: str) -> str:
    """`text`, cut to HINT_CHARS with an ellipsis."""
    return text if len(text) <= HINT_CHARS else text[:HINT_CHARS] + "…"


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
    focus: str = ""  # the token whose query the figures focus on
    demo: str = ""  # a sequence the figures trace
    n_sequences: int = 2000
    n_held_out: int = 200
    min_len: int = 20
    max_len: int = 50
    measured: str = ""  # rule error measured with the default preset and recipe
    # The number behind `measured`: the median held-out rule error of seeds 0-3 trained with the
    # default preset and recipe (bench/tasks_table.py measures it; a test holds the task to it).
    measured_error: float | None = None
    # Model and recipe settings this task trains with unless the user's --set says otherwise,
    # e.g. {"n_layers": 2} (it needs a second layer) or {"steps": 5000} (it learns sooner).
    defaults: dict = {}
    # The task's own settings, set with --set like a model or recipe field: name -> default.
    # A run's config.json keeps the ones that differ from the default (config_extra).
    settings: dict = {}
    # The roles its tokens play, when the rule is a recall ("after a marker, the most recent
    # token of a class"): read by the analysis, compare and corruption. None for other rules.
    recall: Recall | None = None
    default_recipe: str = "default"
    # True for tasks of fixed examples rather than a stream: only positions whose target the
    # rule forces count in the loss (training and held-out).
    answer_only: bool = False
    # True for a task whose targets are classes given with its inputs (a compiled program's
    # values), not next tokens: its TaskData comes from `labelled_data(n_ctx)`.
    labelled: bool = False

    def sample(self, rng: np.random.Generator) -> list[int]:
        """One sequence of token ids, drawn with `rng` (a task's data is `n_sequences` of
        them, from one seeded generator: see `split`)."""
        raise NotImplementedError

    def rule(self, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(target, source) for every position of `seq`, two int arrays as long as it: the
        token the rule forces there (-1 where anything may follow) and the earliest position
        that target depends on."""
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

    def forced_after(self, prefix: np.ndarray) -> tuple[int, int]:
        """(target, source) the rule forces for the token after `prefix`: (-1, -1) when it
        leaves that token free."""
        target, source = self.rule(np.append(np.asarray(prefix), 0))
        return int(target[-1]), int(source[-1])

    def corrupt(self, inputs: np.ndarray, index: np.ndarray, rng: np.random.Generator):
        """Corrupted copies of rule windows (W, T) whose prediction at `index` (W,) the rule
        forces, for activation patching, resample ablation and path patching: (corrupt inputs,
        the rule's target in each corrupt window), each target different from the clean one.

        One token changes per window: for a recall task, the token the rule must retrieve
        becomes another wanted token (uniformly); otherwise the first single change (the rule's
        source position first, then the others; tokens in a random order) under which the rule
        still forces a target, a different one. Raises FlatformerError when a window cannot be corrupted so.
        """
        inputs = np.array(inputs, dtype=np.int64)
        index = np.asarray(index)
        rows = np.arange(len(inputs))
        if self.recall is not None:
            source = recall_sources(inputs, index, self.recall.mask(self.vocab))
            if (source < 0).any():
                raise FlatformerError(
                    f"corrupt: a window of {self.name} holds no "
                    f"{self.recall.names[0]} token before its prediction"
                )
            wanted = np.asarray(self.recall.ids(self.vocab)[1])
            slot = (inputs[rows, source][:, None] == wanted[None]).argmax(1)
            new = wanted[(slot + rng.integers(1, len(wanted), len(rows))) % len(wanted)]
            inputs[rows, source] = new
            return inputs, new
        targets = np.empty(len(inputs), dtype=np.int64)
        for w, (window, i) in enumerate(zip(inputs, index)):
            target, source = self.forced_after(window[: i + 1])
            if target < 0:
                raise FlatformerError(
                    f"corrupt: the rule of {self.name} does not force the "
                    f"token after position {i} of window {w}"
                )
            others = [p for p in rng.permutation(i + 1) if p != source]
            for p, token in (
                (p, t) for p in [source, *others] for t in rng.permutation(len(self.vocab))
            ):
                changed = window.copy()
                changed[p] = token
                new = self.forced_after(changed[: i + 1])[0]
                if new >= 0 and new != target:
                    inputs[w], targets[w] = changed, new
                    break
            else:
                raise FlatformerError(
                    f"corrupt: no single token change of window {w} changes "
                    f"what the rule of {self.name} forces"
                )
        return inputs, targets

    def check_config(self, cfg) -> None:
        """Raise FlatformerError when the model config cannot serve this task (default: any)."""

    def config_extra(self) -> dict:
        """Entries a run's config.json needs, beside the name, to rebuild this task (default:
        the settings that differ from their defaults; the corpus task keeps its text)."""
        changed = {k: getattr(self, k) for k, v in self.settings.items() if getattr(self, k) != v}
        return {"task_settings": changed} if changed else {}

    def loss_floor(self, data) -> dict | None:
        """The lowest held-out loss any model could reach, when the task knows it (None: it
        does not): {"entropy_rate": nats per token, "floor": nats on the held-out windows}."""
        return None

    def split(self, data_seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The fixed training and held-out sequences: the last `n_held_out` are held out."""
        rng = np.random.default_rng(data_seed)
        seqs = [np.asarray(self.sample(rng), dtype=np.int64) for _ in range(self.n_sequences)]
        return seqs[: -self.n_held_out], seqs[-self.n_held_out :]

    def encode(self, text: str) -> list[int]:
        """Tokens from a space-separated string, refusing anything outside the vocabulary."""
        index = {tok: i for i, tok in enumerate(self.vocab)}
        tokens = []
        for word in text.split():
            if word not in index:
                shown = word if len(word) <= 40 else word[:40] + "..."
                split = [split_word(w, index) or [w] for w in text.split()]
                hint = (
                    f"; tokens are separated by spaces: did you mean "
                    f'"{cut(" ".join(t for ts in split for t in ts))}"?'
                    if split_word(word, index)
                    else ""
                )
                raise FlatformerError(
                    f"token {shown!r} is not in the vocabulary of {self.name} "
                    f"({cut(' '.join(self.vocab[:30]))}){hint}"
                )
            tokens.append(index[word])
        return tokens

    def decode(self, tokens) -> str:
        """Token ids as the space-separated text `encode` reads back."""
        return " ".join(self.vocab[int(t)] for t in tokens)

    def encode_pieces(self, text: str) -> list[int]:
        """Tokens named as the vocabulary names them, space-separated, whatever `encode` reads
        (text, for a task with a tokenizer): `generate --pieces`."""
        return Task.encode(self, text)

    def decode_pieces(self, tokens) -> str:
        """Token ids by their names, space-separated, as `encode_pieces` reads them back."""
        return Task.decode(self, tokens)

    def model_label(self) -> str:
        """The default preset with the model settings of `defaults`, e.g. "simulator-16d,
        n_layers=2"."""
        extra = [
            f"{k}={v}" for k, v in self.defaults.items() if k in ModelConfig.__dataclass_fields__
        ]
        return ", ".join([self.default_preset, *extra])

    def describe(self) -> str:
        """The first paragraph of the docstring."""
        return (self.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def recall_sources(inputs: np.ndarray, index: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each window (W, T), the position of the last token in `wanted` (a (V,) mask) before
    `index` (W,), where a recall reads from; -1 if none."""
    T = inputs.shape[1]
    before = (np.arange(T)[None, :] < index[:, None]) & wanted[inputs]
    last = T - 1 - np.argmax(before[:, ::-1], axis=1)
    return np.where(before.any(1), last, -1)


def recent_target(
    seq: np.ndarray, marker: int, wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
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
