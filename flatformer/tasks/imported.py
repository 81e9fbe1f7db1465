"""The task of an imported model: no rule and no generator, only its vocabulary.

A model from another framework comes without a task. Its run keeps the source's vocabulary,
either characters (nanoGPT's `meta.pkl`: prompts are plain text, as with `--tokenizer char`
corpora) or token ids named "0" ... "V-1" (prompts are space-separated ids).

What the commands measure on (held-out loss, mean ablation, the lens's and figures' windows) is
a text given at import (`flatformer import ... --corpus TEXT`), kept in the run's config: the
whole text is the held-out set. Its rule error is a corpus's: the fraction of positions where
the model's top next token never follows the current token anywhere in the text. Without a
text, `generate`, `explore` and the commands given prompts work; `eval RUN --corpus TEXT`
measures any text.

Example: a character model over `a b c` encodes "cab" as [2, 0, 1]; an id model encodes
"2 0 1" the same.
"""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .base import Task
from .corpus import char_name


MAX_TEXT_TOKENS = 100_000  # 400 held-out windows of a 256-token context, kept in config.json
MAX_RULE_VOCAB = 4096  # the (V, V) table of which token follows which
MAX_TABLE = 20_000_000  # tokens x vocabulary of the held-out set's allowed-token table
NO_TEXT = (
    "an imported model has no held-out text to measure on: import it with --corpus TEXT "
    "(flatformer eval RUN --corpus TEXT measures a text without it)"
)


class ImportedTask(Task):
    name = "imported"

    def __init__(
        self,
        vocab: list[str],
        tokenizer: str = "ids",
        raw: dict | None = None,
        text: str | None = None,
    ):
        if tokenizer not in ("ids", "char"):
            raise FlatformerError(
                f"imported task: tokenizer must be ids or char, got {tokenizer!r}"
            )
        self.vocab, self.tokenizer = list(vocab), tokenizer
        self.raw = dict(raw or {})  # visible name -> the whitespace character behind it
        self.focus = self.vocab[0]
        self.demo = ""
        self.text, self.tokens, self._follows = None, None, None
        if text is not None:
            self.set_text(text)

    def set_text(self, text: str, n_ctx: int | None = None):
        """The held-out text: its last MAX_TEXT_TOKENS tokens, at least n_ctx + 1 of them."""
        if not isinstance(text, str):
            raise FlatformerError("imported task: its held-out text must be a string")
        try:
            tokens = self.encode(text)
        except FlatformerError:  # not quoted: the file may be one never meant to be shown
            raise FlatformerError(
                "the held-out text holds a token outside the model's vocabulary: is it a text "
                "in this model's vocabulary?"
            ) from None
        # The held-out set keeps a (tokens, V) table of allowed next tokens: bound its size.
        tokens = tokens[-min(MAX_TEXT_TOKENS, MAX_TABLE // len(self.vocab)) :]
        if n_ctx is not None and len(tokens) <= n_ctx:
            raise FlatformerError(
                f"the held-out text has {len(tokens)} tokens; the model reads {n_ctx}, so it "
                f"needs at least {n_ctx + 1}"
            )
        self.tokens, self._follows = np.asarray(tokens, dtype=np.int64), None
        self.text = self.decode(self.tokens)
        self.focus = self.vocab[int(np.bincount(self.tokens).argmax())]
        self.demo = self.decode(self.tokens[:8])

    @classmethod
    def from_chars(cls, chars: list[str]) -> "ImportedTask":
        """A character vocabulary in the source's order, whitespace by its visible name."""
        names = [char_name(ch) for ch in chars]
        return cls(names, "char", {char_name(ch): ch for ch in chars if ch.isspace()})

    def config_extra(self) -> dict:
        extra = {"tokenizer": self.tokenizer, "raw": self.raw}
        if self.text is not None:
            extra["text"] = self.text
        return {"imported_task": extra}

    def sample(self, rng):
        raise FlatformerError(
            "an imported model has no task to draw sequences from: "
            "flatformer generate and explore work on it"
        )

    def rule(self, seq):
        return np.full(len(seq), -1), np.full(len(seq), -1)

    def allowed(self, seq):
        """After each token, the tokens that follow it somewhere in the held-out text (as
        `CorpusTask.allowed`, with the text as its own reference)."""
        seq = np.asarray(seq)
        mask = np.ones((len(seq), len(self.vocab)), dtype=bool)
        source = np.full(len(seq), -1)
        if self.tokens is None or len(seq) < 2 or len(self.vocab) > MAX_RULE_VOCAB:
            return mask, source
        if self._follows is None:
            follows = np.zeros((len(self.vocab),) * 2, dtype=bool)
            follows[self.tokens[:-1], self.tokens[1:]] = True
            self._follows = follows
        rows = self._follows[seq[:-1]]
        seen = rows.any(1)
        mask[1:][seen] = rows[seen]
        source[1:][seen] = np.flatnonzero(seen)
        return mask, source

    def split(self, data_seed: int = 0):
        """The held-out text, whole, as both sets: an imported model is never trained here."""
        if self.tokens is None:
            raise FlatformerError(NO_TEXT)
        return [self.tokens], [self.tokens]

    def encode(self, text: str) -> list[int]:
        if self.tokenizer == "ids":
            return super().encode(text)
        index = {name: i for i, name in enumerate(self.vocab)}
        index.update({ch: index[name] for name, ch in self.raw.items()})
        missing = [ch for ch in text if ch not in index]
        if missing:
            raise FlatformerError(f"character {missing[0]!r} is not in the model's vocabulary")
        return [index[ch] for ch in text]

    def decode(self, tokens) -> str:
        if self.tokenizer == "ids":
            return super().decode(tokens)
        return "".join(self.raw.get(self.vocab[int(t)], self.vocab[int(t)]) for t in tokens)


def imported_for_run(config: dict) -> ImportedTask:
    spec = config.get("imported_task")
    if not isinstance(spec, dict) or not isinstance(spec.get("raw", {}), dict):
        raise FlatformerError("run config names an imported model but holds no imported_task")
    return ImportedTask(
        config["vocab"], spec.get("tokenizer", "ids"), spec.get("raw"), spec.get("text")
    )
