"""Behaviour defined by examples: a JSON-lines prompts file, one example a line,
`{"prompt": "4 1 + 4 6 9 5 +", "target": "6", "corrupt": "4 1 + 4 8 9 5 +"}`.

Each prompt is encoded with the run's `task.encode`; the target is one token, the next token
after the prompt, so the metric reads the prompt's last position. Prompts of different lengths
are right-padded with token 0: attention is causal, so nothing after the read position changes
its logits. A corrupt prompt (optional; all lines or none) must have its clean prompt's length,
so positions align for resample ablation and patching; its target is the token it predicts,
written as "corrupt_target" (required with "corrupt").
"""

from __future__ import annotations


import numpy as np

from ..errors import FlatformerError
from ..store.read import parse_json, read_text
from .base import cut

MAX_BYTES = 10_000_000


def task_examples(task, data, n: int) -> list[dict]:
    """The same held-out windows, read positions and targets `flatformer circuits` measures a
    task on (edges.methods.prompts_for), with the task's corruption, as example lines."""
    from ..edges.methods import prompts_for

    tokens, index, target = prompts_for(task, data, n)
    made = task.corrupt(tokens, index, np.random.default_rng(0))
    rows = []
    for i in range(len(tokens)):
        row = {"prompt": task.decode(tokens[i, : index[i] + 1]), "target": task.decode([target[i]])}
        if made is not None:
            row["corrupt"] = task.decode(made[0][i, : index[i] + 1])
            row["corrupt_target"] = task.decode([made[1][i]])
        rows.append(row)
    return rows


def _encode(task, text, what, line) -> list[int]:
    if not isinstance(text, str):
        raise FlatformerError(f"prompts line {line}: {what} must be a string, got {text!r}")
    try:
        return task.encode(text)
    except FlatformerError as exc:
        raise FlatformerError(f"prompts line {line}: {what}: {exc}") from None


def pieces(task, ids) -> str:
    """The tokens a text became, by name, where that is news: a tokenizer's pieces (Ġthe Ġcat)
    are not what was typed; an empty string where the names are the text itself (ids,
    characters)."""
    named = task.decode_pieces(ids)
    if "".join(named.split()) == "".join(task.decode(ids).split()):
        return ""
    return f" ({cut(named)})"


def _one_token(task, text, what, line) -> int:
    ids = _encode(task, text, what, line)
    if len(ids) != 1:
        raise FlatformerError(
            f"prompts line {line}: {what} must be exactly one token, got {len(ids)}"
            f"{pieces(task, ids)}"
        )
    return ids[0]


def _sequence(task, text, what, line, n_ctx) -> list[int]:
    ids = _encode(task, text, what, line)
    if not 1 <= len(ids) <= n_ctx:
        raise FlatformerError(
            f"prompts line {line}: {what} has {len(ids)} tokens; the model reads 1..{n_ctx}"
        )
    return ids


def read_lines(path, task, n_ctx: int, what: str = "prompts file") -> tuple[list[np.ndarray], int]:
    """Prompts from a file, one a line, encoded by the run's task (its tokenizer, where it has
    one); blank lines and lines starting with # are skipped. A prompt longer than the context is
    read through its last n_ctx tokens, as the model would see it while generating. Returns
    (prompts, how many were cut); one-line errors name the line."""
    prompts, cut = [], 0
    for n, raw in enumerate(read_text(path, what, MAX_BYTES).splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        ids = _encode(task, text, "prompt", n)
        if not ids:
            raise FlatformerError(f"prompts line {n}: the prompt encodes to no token")
        if len(ids) > n_ctx:
            ids, cut = ids[-n_ctx:], cut + 1
        prompts.append(np.asarray(ids, dtype=np.int64))
    if not prompts:
        raise FlatformerError(f"{what} {path} holds no prompt")
    return prompts, cut


def is_examples_file(path) -> bool:
    """A JSON-lines prompts file: its first line that is not blank or a # comment parses as a
    JSON object (a plain prompt never does: it is tokens separated by spaces)."""
    for line in read_text(path, "prompts file", MAX_BYTES).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            try:
                return isinstance(parse_json(line, "prompts file"), dict)
            except FlatformerError:  # a plain prompt, or deep nesting read as one
                return False
    return False


def _target(task, text, what, line, classes) -> int:
    """A target as the logit it names: a token of the task (encoded as prompts are), or, for a
    model whose outputs are classes of their own (a compiled program's values), a class name."""
    if classes is None or classes == task.vocab[: len(classes)]:
        token = _one_token(task, text, what, line)
        if classes is not None and token >= len(classes):
            raise FlatformerError(
                f"prompts line {line}: {what} {text!r:.40} is not one of the model's "
                f"{len(classes)} outputs"
            )
        return token
    if not isinstance(text, str) or text.strip() not in classes:
        shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
        raise FlatformerError(
            f"prompts line {line}: {what} must be one of the model's outputs ({shown}), "
            f"got {text!r:.40}"
        )
    return classes.index(text.strip())


def read_examples(path, task, n_ctx: int, classes: list[str] | None = None):
    """(tokens (B, T), index (B,), target (B,), corrupt (B, T) or None, corrupt_target or None)
    from a prompts file, every line checked; one-line errors name the line. `classes` names
    the logits (`Run.vocab_out`) where they are not the task's tokens."""
    text = read_text(path, "prompts file", MAX_BYTES)
    rows = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        row = parse_json(raw, f"prompts line {n}")  # nesting counted first: no RecursionError
        if not isinstance(row, dict) or "prompt" not in row or "target" not in row:
            raise FlatformerError(f'prompts line {n}: needs an object with "prompt" and "target"')
        extra = set(row) - {"prompt", "target", "corrupt", "corrupt_target"}
        if extra:
            raise FlatformerError(f"prompts line {n}: unknown field {sorted(extra)[0]!r}")
        clean = _sequence(task, row["prompt"], "prompt", n, n_ctx)
        target = _target(task, row["target"], "target", n, classes)
        corrupt = ctarget = None
        if "corrupt" in row:
            corrupt = _sequence(task, row["corrupt"], "corrupt", n, n_ctx)
            if len(corrupt) != len(clean):
                raise FlatformerError(
                    f"prompts line {n}: corrupt has {len(corrupt)} tokens{pieces(task, corrupt)}, "
                    f"prompt {len(clean)}{pieces(task, clean)}; they must align"
                )
            if "corrupt_target" not in row:
                raise FlatformerError(f"prompts line {n}: corrupt needs a corrupt_target")
            ctarget = _target(task, row["corrupt_target"], "corrupt_target", n, classes)
        rows.append((n, clean, target, corrupt, ctarget))
    if not rows:
        raise FlatformerError(f"prompts file {path} has no examples")
    if len({r[3] is None for r in rows}) > 1:
        first = next(r[0] for r in rows if (r[3] is None) != (rows[0][3] is None))
        raise FlatformerError(f'prompts line {first}: give "corrupt" on every line or none')
    width = max(len(r[1]) for r in rows)
    tokens = np.zeros((len(rows), width), dtype=np.int64)
    corrupt = None if rows[0][3] is None else np.zeros_like(tokens)
    for i, (_, clean, _, bad, _) in enumerate(rows):
        tokens[i, : len(clean)] = clean
        if corrupt is not None:
            corrupt[i, : len(bad)] = bad
    index = np.array([len(r[1]) - 1 for r in rows])
    target = np.array([r[2] for r in rows])
    ctarget = None if corrupt is None else np.array([r[4] for r in rows])
    return tokens, index, target, corrupt, ctarget
