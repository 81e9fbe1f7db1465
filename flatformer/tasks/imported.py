"""The task of an imported model: no rule and no generator, only its vocabulary.

A model from another framework comes without a task. Its run keeps the source's vocabulary:
its own tokenizer (a Hugging Face `tokenizer.json`, applied with the `tokenizers` library:
prompts are plain text), characters (nanoGPT's `meta.pkl`: prompts are plain text, as with
`--tokenizer char` corpora) or token ids named "0" ... "V-1" (prompts are space-separated ids).
Every kind also reads its tokens' names typed space-separated (`encode_pieces`).

What the commands measure on (held-out loss, mean ablation, the lens's and figures' windows) is
a text given at import (`flatformer import ... --corpus TEXT`), kept in the run's config: the
whole text is the held-out set. Its rule error is a corpus's: the fraction of positions where
the model's top next token never follows the current token anywhere in the text. Without a
text, `generate`, `explore` and the commands given prompts work; `eval RUN --corpus TEXT`
measures any text.

Example: a character model over `a b c` encodes "cab" as [2, 0, 1]; an id model encodes
"2 0 1" the same; a GPT-2 tokenizer encodes " the cat" as its pieces `Ġthe Ġcat`.
"""

from __future__ import annotations

import numpy as np

from ..errors import FlatformerError
from .base import Task
from .corpus import char_name


TOKENIZERS = ("ids", "char", "hf")  # hf: a Hugging Face tokenizer.json, kept in the run
MAX_TEXT_TOKENS = 100_000  # 400 held-out windows of a 256-token context, kept in config.json
MAX_RULE_VOCAB = 4096  # the (V, V) table of which token follows which
MAX_TABLE = 20_000_000  # tokens x vocabulary of the held-out set's allowed-token table
NO_TEXT = (
    "an imported model has no held-out text to measure on: import it with --corpus TEXT "
    "(flatformer eval RUN --corpus TEXT measures a text without it)"
)


class ImportedTask(Task):
    name = "imported"
    # Positions the rule error reads, at most (tasks.windows): an imported model is the large
    # one, its every window a full forward pass of its context.
    rule_tokens = 2**15

    def __init__(
        self,
        vocab: list[str],
        tokenizer: str = "ids",
        raw: dict | None = None,
        text: str | None = None,
        tokenizer_json: str | None = None,
    ):
        if tokenizer not in TOKENIZERS:
            raise FlatformerError(
                f"imported task: tokenizer must be one of {', '.join(TOKENIZERS)}, "
                f"got {tokenizer!r:.40}"
            )
        if (tokenizer == "hf") != isinstance(tokenizer_json, str):
            raise FlatformerError("imported task: a tokenizer.json comes with tokenizer hf only")
        self.vocab, self.tokenizer = list(vocab), tokenizer
        self.raw = dict(raw or {})  # visible name -> the whitespace character behind it
        self.tokenizer_json = tokenizer_json
        # The Hugging Face tokenizer, built once and checked against the vocabulary it named.
        self._hf = None if tokenizer_json is None else load_tokenizer(tokenizer_json, "run")
        # Embedding rows beyond the tokenizer's vocabulary (a padded one), last in `vocab`.
        self.unused = 0
        if self._hf is not None:
            if piece_names(self._hf, len(self.vocab))[0] != self.vocab:
                raise FlatformerError("imported task: its vocabulary is not its tokenizer's")
            self.unused = len(self.vocab) - len(self._hf.get_vocab(with_added_tokens=True))
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
            form = {
                "ids": f"ids 0 to {len(self.vocab) - 1} separated by spaces",
                "char": f"the {len(self.vocab)} characters of its meta.pkl",
            }.get(self.tokenizer, "its tokenizer's pieces")
            raise FlatformerError(
                "the held-out text holds a token outside the model's vocabulary: is it a text "
                f"in this model's vocabulary ({form})?"
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

    @classmethod
    def from_tokenizer(cls, tokenizer_json: str, d_vocab: int) -> tuple["ImportedTask", int]:
        """A Hugging Face tokenizer's task over a model of `d_vocab` embedding rows, and how
        many of its tokens are shown by a visible name."""
        names, renamed = piece_names(load_tokenizer(tokenizer_json, "tokenizer"), d_vocab)
        return cls(names, "hf", tokenizer_json=tokenizer_json), renamed

    @property
    def label(self) -> str:
        """How prompts are read, for the import's summary line."""
        if self._hf is None:
            return self.tokenizer
        return "its tokenizer, text" + (f"; {self.unused} rows unused" if self.unused else "")

    def config_extra(self) -> dict:
        extra = {"tokenizer": self.tokenizer, "raw": self.raw}
        if self.tokenizer_json is not None:
            extra["tokenizer_json"] = self.tokenizer_json
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
        if self._hf is not None:
            # The text as written: no BOS or EOS a template would add around it.
            return self._hf.encode(text, add_special_tokens=False).ids
        if self.tokenizer == "ids":
            return super().encode(text)
        index = {name: i for i, name in enumerate(self.vocab)}
        index.update({ch: index[name] for name, ch in self.raw.items()})
        missing = [ch for ch in text if ch not in index]
        if missing:
            raise FlatformerError(f"character {missing[0]!r} is not in the model's vocabulary")
        return [index[ch] for ch in text]

    def decode(self, tokens) -> str:
        if self._hf is not None:
            return self._hf_decode([int(t) for t in tokens])
        if self.tokenizer == "ids":
            return super().decode(tokens)
        return "".join(self.raw.get(self.vocab[int(t)], self.vocab[int(t)]) for t in tokens)

    def _hf_decode(self, ids: list[int]) -> str:
        """The tokenizer's text; a row beyond its vocabulary (which it would drop silently)
        written by its name, and each run between such rows decoded whole, so the bytes of a
        character split over tokens come back together."""
        n = len(self.vocab) - self.unused
        parts, run = [], []
        for t in ids + [None]:
            if t is not None and t < n:
                run.append(t)
                continue
            if run:
                parts.append(self._hf.decode(run, skip_special_tokens=False))
                run = []
            if t is not None:
                parts.append(self.vocab[t])
        return "".join(parts)


def imported_for_run(config: dict) -> ImportedTask:
    imported = config.get("imported")
    rasp = imported.get("rasp") if isinstance(imported, dict) else None
    if isinstance(rasp, dict):  # a compiled program: its targets are classes
        from .program import program_for_run

        return program_for_run(config, rasp)
    spec = config.get("imported_task")
    if not isinstance(spec, dict) or not isinstance(spec.get("raw", {}), dict):
        raise FlatformerError("run config names an imported model but holds no imported_task")
    return ImportedTask(
        config["vocab"],
        spec.get("tokenizer", "ids"),
        spec.get("raw"),
        spec.get("text"),
        spec.get("tokenizer_json"),
    )


def load_tokenizer(text: str, where: str):
    """A `tokenizers.Tokenizer` from tokenizer.json's text; one line naming `where` if the
    library cannot read it."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # the library raises its own exceptions, of several types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FlatformerError(
            f"{where}: not a tokenizer the tokenizers library reads ({first[:120]})"
        ) from None


def piece_names(hf, d_vocab: int) -> tuple[list[str], int]:
    """The name of every embedding row: the tokenizer's pieces, whitespace written by its
    visible name (a space as ␣) as the char tokenizer does, then `<unused N>` for each row
    beyond the tokenizer (a padded vocabulary; no text encodes to them); and how many pieces
    were renamed."""
    ids = hf.get_vocab(with_added_tokens=True)
    n = len(ids)
    if sorted(ids.values()) != list(range(n)):
        raise FlatformerError("the tokenizer does not number its tokens 0..n-1 once each")
    if n > d_vocab:
        raise FlatformerError(
            f"the tokenizer has {n:,} tokens; the model's embedding has {d_vocab:,} rows"
        )
    pieces = sorted(ids, key=ids.get)
    shown = ["".join(char_name(c) for c in p) for p in pieces]
    shown += [f"<unused {i}>" for i in range(n, d_vocab)]
    if "" in shown or len(set(shown)) != d_vocab:
        raise FlatformerError(
            "the tokenizer has an empty token, or two tokens alike once whitespace is shown "
            "(␣ ⏎ ⇥) or named as unused rows are"
        )
    return shown, sum(a != b for a, b in zip(shown, pieces))
