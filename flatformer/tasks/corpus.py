"""The user's own text as a task: `flatformer train --corpus FILE --tokenizer word|char`."""

from __future__ import annotations

import re
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from ..errors import FlatformerError
from ..store.read import read_bytes
from .base import Task

MAX_BYTES = 2_000_000  # a default run reads about 1.3 million tokens: more text goes unseen
MIN_TOKENS = 120
TOKENS_PER_DIM = 32  # vocabulary limit: 32 tokens per embedding dimension
TOKENIZERS = ("word", "char")
# Control characters other than tab, newline, carriage return and form feed: text has none,
# binary files have many.
CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")


def read_text(path) -> str:
    """A corpus file's text, refusing what is not text: missing, empty, too large, NUL bytes,
    undecodable UTF-8 or control characters. Windows line endings become newlines."""
    path = Path(path)
    data = read_bytes(path, "corpus", MAX_BYTES)
    nul = data.find(b"\0")
    if nul >= 0:
        raise FlatformerError(
            f"corpus {path} looks binary (a NUL byte at offset {nul}); "
            f"flatformer trains on UTF-8 text"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FlatformerError(
            f"corpus {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    text = text.replace("\r\n", "\n")
    control = CONTROL.search(text)
    if control:
        raise FlatformerError(
            f"corpus {path} looks binary (control character "
            f"U+{ord(control.group()):04X} at character {control.start()}); "
            f"flatformer trains on text"
        )
    if not text.strip():
        raise FlatformerError(f"corpus {path} is empty")
    return text


# Whitespace characters get visible names in a character vocabulary: a blank token could not
# be told apart in figures, tables and the explorer, which refuses blank words.
SPACE_NAMES = {" ": "␣", "\n": "⏎", "\t": "⇥"}


def char_name(ch: str) -> str:
    return SPACE_NAMES.get(ch, f"U+{ord(ch):04X}") if ch.isspace() else ch


def tokenize(text: str, tokenizer: str) -> list[str]:
    """Words (split at whitespace; punctuation stays attached unless spaced out) or characters
    (whitespace by its visible name: ␣ for a space, ⏎ for a newline)."""
    if tokenizer not in TOKENIZERS:
        raise FlatformerError(f"unknown tokenizer {tokenizer!r}; choose word or char")
    if tokenizer == "word":
        return text.split()
    if any(name in text for name in SPACE_NAMES.values()):
        raise FlatformerError(
            "the text uses one of ␣ ⏎ ⇥, which the char tokenizer uses to show whitespace"
        )
    names = {ch: char_name(ch) for ch in set(text)}
    return [names[ch] for ch in text]


class CorpusTask(Task):
    """Next-token prediction on your own text.

    The vocabulary is every distinct word (split at whitespace) or character, sorted. The text
    is one long sequence: the last 10% of its tokens (at least 40, at most 2,000) are held out,
    the rest trains, and windows run across lines and sentences.

    Rule error: the fraction of held-out positions where the model's top next token never
    follows the current token anywhere in the training text (a word pair, or character pair,
    the corpus never has). It falls fast and says the model has the corpus's local grammar; the
    held-out loss says the rest.

    Example: a file holding `the cat sat . the dog sat .`, word-tokenized, has the vocabulary
    `. cat dog sat the`; after `the`, the training text allows `cat` and `dog`.
    """

    name = "corpus"
    default_preset = "simulator-16d"

    def __init__(self, text: str, tokenizer: str = "word", file: str = ""):
        words = tokenize(text, tokenizer)
        if len(words) < MIN_TOKENS:
            raise FlatformerError(
                f"corpus {file or 'text'} has {len(words)} {tokenizer} tokens; "
                f"flatformer needs at least {MIN_TOKENS} (the last 10%, at "
                f"least 40, are held out)"
            )
        self.text, self.tokenizer, self.file = text, tokenizer, file
        self.vocab = sorted(set(words))
        # the character behind each visible whitespace name (char tokenizer only)
        self.raw = {char_name(ch): ch for ch in set(text) if ch.isspace()}
        if len(self.vocab) < 2:
            raise FlatformerError(
                f"corpus {file or 'text'} has only one distinct {tokenizer} "
                f"token: there is nothing to predict"
            )
        index = {w: i for i, w in enumerate(self.vocab)}
        self.tokens = np.array([index[w] for w in words], dtype=np.int64)
        self.n_held_out = int(np.clip(len(words) // 10, 40, 2000))
        counts = np.bincount(self.tokens, minlength=len(self.vocab))
        self.focus = self.vocab[int(counts.argmax())]  # the most common token
        self.demo = self.decode(self.tokens[:8])

    @classmethod
    def from_file(cls, path, tokenizer: str = "word") -> "CorpusTask":
        """The task for a text file, with one-line errors for files that are not usable text."""
        tokenize("", tokenizer)  # an unknown tokenizer is refused before the file is read
        return cls(read_text(path), tokenizer, Path(path).name)

    def config_extra(self) -> dict:
        """What a run's config.json keeps to rebuild this task: the text itself, so a run
        folder stays self-contained when moved."""
        return {"corpus": {"file": self.file, "tokenizer": self.tokenizer, "text": self.text}}

    def check_config(self, cfg) -> None:
        limit = TOKENS_PER_DIM * cfg.d_model
        if len(self.vocab) > limit:
            hint = (
                "try --tokenizer char, a wider model (--set d_model=N) or a smaller text"
                if self.tokenizer == "word"
                else "try a wider model (--set d_model=N) or a smaller text"
            )
            raise FlatformerError(
                f"corpus {self.file or 'text'} has {len(self.vocab):,} distinct "
                f"{self.tokenizer} tokens; a model with d_model {cfg.d_model} takes at most "
                f"{limit} ({TOKENS_PER_DIM} per dimension: beyond that it is mostly a lookup "
                f"table and its figures are unreadable): {hint}"
            )

    def split(self, data_seed: int = 0):
        """The text's first 90% trains and its last 10% is held out (`data_seed` is unused)."""
        return [self.tokens[: -self.n_held_out]], [self.tokens[-self.n_held_out :]]

    def sample(self, rng):
        raise FlatformerError("the corpus task has no generator: its text is fixed")

    def rule(self, seq):
        return np.full(len(seq), -1), np.full(len(seq), -1)

    @cached_property
    def follows(self) -> np.ndarray:
        """(V, V): whether token b ever follows token a in the training text. Built on first use,
        after check_config has refused vocabularies too large for such a table."""
        train = self.tokens[: -self.n_held_out]
        table = np.zeros((len(self.vocab), len(self.vocab)), dtype=bool)
        table[train[:-1], train[1:]] = True
        return table

    def allowed(self, seq):
        """After each token, the tokens that follow it somewhere in the training text."""
        seq = np.asarray(seq)
        mask = np.ones((len(seq), len(self.vocab)), dtype=bool)
        source = np.full(len(seq), -1)
        if len(seq) > 1:
            rows = self.follows[seq[:-1]]
            seen = rows.any(1)  # a token the training text never continues constrains nothing
            mask[1:][seen] = rows[seen]
            source[1:][seen] = np.flatnonzero(seen)
        return mask, source

    def encode(self, text: str) -> list[int]:
        """Words split at whitespace, or every character of `text` (␣ and ⏎ may be typed for a
        space and a newline)."""
        if self.tokenizer == "word":
            return super().encode(text)
        index = {name: i for i, name in enumerate(self.vocab)}
        index.update({ch: index[name] for name, ch in self.raw.items()})
        missing = [ch for ch in text if ch not in index]
        if missing:
            raise FlatformerError(f"character {missing[0]!r} is not in the corpus vocabulary")
        return [index[ch] for ch in text]

    def decode(self, tokens) -> str:
        """Text again: words joined by spaces, or the characters as they were."""
        if self.tokenizer == "word":
            return super().decode(tokens)
        return "".join(self.raw.get(self.vocab[int(t)], self.vocab[int(t)]) for t in tokens)


@lru_cache(maxsize=4)
def corpus_task(text: str, tokenizer: str, file: str) -> CorpusTask:
    """Cached: a run's task is rebuilt on every `run.task`, and tokenizing a large text is slow."""
    return CorpusTask(text, tokenizer, file)


def corpus_for_run(config: dict) -> CorpusTask:
    """The corpus task a run's config.json describes, checked against its vocabulary."""
    spec = config.get("corpus")
    if not isinstance(spec, dict) or not isinstance(spec.get("text"), str):
        raise FlatformerError("run config names the corpus task but holds no corpus text")
    task = corpus_task(spec["text"], spec.get("tokenizer", "word"), spec.get("file", ""))
    if config.get("vocab") is not None and list(config["vocab"]) != task.vocab:
        raise FlatformerError(
            "run config's vocabulary does not match its corpus text (was config.json edited?)"
        )
    return task
