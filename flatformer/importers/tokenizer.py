"""A Hugging Face folder's own tokenizer, as the source ships it: `tokenizer.json`, or GPT-2's
`vocab.json` with `merges.txt` (byte-level BPE), read with the `tokenizers` library and kept as
tokenizer.json text, which the run stores and applies (`tasks.imported`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import FlatformerError
from ..store.read import parse_json, read_json, read_text
from ..tasks.imported import load_tokenizer

# GPT-2's tokenizer.json is 1.4 MB. The run's config.json keeps it as one JSON string (at most
# six bytes a character escaped) beside its held-out text, within the config's 16 MB.
MAX_TOKENIZER_BYTES = 2 << 20


def read_folder(folder: Path) -> str | None:
    """The folder's tokenizer as tokenizer.json text, or None when it ships none."""
    folder = Path(folder)
    path, vocab, merges = (folder / n for n in ("tokenizer.json", "vocab.json", "merges.txt"))
    if path.exists():
        text = read_text(path, "tokenizer.json", MAX_TOKENIZER_BYTES)
        parse_json(text, str(path))  # its nesting counted before a library parses it
        load_tokenizer(text, str(path))  # refused now, not at the run's first prompt
        return text
    if vocab.exists() != merges.exists():
        have, lack = (vocab, merges) if vocab.exists() else (merges, vocab)
        raise FlatformerError(f"{have} without {lack.name}: a BPE tokenizer needs both")
    if not vocab.exists():
        return None
    return byte_level_bpe(vocab, merges)


def byte_level_bpe(vocab: Path, merges: Path) -> str:
    """GPT-2's tokenizer from its two files, built by the library as GPT-2's tokenizer.json
    has it: byte-level pre-tokenizer and decoder around a BPE model."""
    from tokenizers import ByteLevelBPETokenizer

    ids = read_json(vocab, "vocab.json", MAX_TOKENIZER_BYTES)
    if not isinstance(ids, dict) or not all(isinstance(i, int) for i in ids.values()):
        raise FlatformerError(f"{vocab}: not an object of token: id")
    pairs = []
    lines = read_text(merges, "merges.txt", MAX_TOKENIZER_BYTES).splitlines()
    for n, line in enumerate(lines, 1):
        if not line or (n == 1 and line.startswith("#version")):
            continue
        pair = tuple(line.split(" "))
        if len(pair) != 2:
            raise FlatformerError(f"{merges} line {n}: a merge is two tokens and one space")
        pairs.append(pair)
    try:
        return ByteLevelBPETokenizer(ids, pairs).to_str()
    except Exception as exc:  # the library's own, e.g. a merge naming no token of vocab.json
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FlatformerError(f"{vocab}, {merges}: not a BPE tokenizer ({first[:120]})") from None
