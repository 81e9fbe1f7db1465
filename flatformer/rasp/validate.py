"""Check a compiled model against the interpreter, position by position, on every input up to
its max_len (or, where there are more than `limit`, on a seeded random sample of that many):
what tracr's `validate` is for (Lindner et al. 2023), done by running the model."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..model.transformer import Transformer
from .compile import CompiledProgram
from .rasp import evaluate, too_wide


@dataclass
class Validation:
    """How many inputs were checked (all of them, or a sample) and the mismatches found."""

    checked: int = 0
    total: int = 0  # inputs up to max_len over the vocabulary
    exhaustive: bool = True
    mismatches: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def cause(self) -> str:
        """Why the first mismatch happened, where an aggregate explains it (else empty)."""
        return self.mismatches[0].get("cause", "") if self.mismatches else ""

    def summary(self) -> str:
        if self.exhaustive:
            how = f"every input ({self.checked:,} checked)"
        else:
            how = f"a random sample ({self.checked:,} of the {self.total:,} inputs)"
        if self.ok:
            return f"model equals the interpreter on {how}"
        first = self.mismatches[0]
        return (
            f"{len(self.mismatches):,} of {self.checked:,} inputs differ; first: "
            f"{first['input']} gives {first['model']}"
            + (f", the program {first['program']}" if first["program"] is not None else "")
            + (f" ({first['cause']})" if first.get("cause") else "")
        )


def same(model_value, program_value) -> bool:
    """Equal as values (True == 1 == 1.0), numbers to 1e-9."""
    if model_value is None or program_value is None:
        return model_value is None and program_value is None
    if isinstance(model_value, (int, float)) and isinstance(program_value, (int, float)):
        return math.isclose(model_value, program_value, rel_tol=1e-9, abs_tol=1e-9)
    return model_value == program_value


def inputs(vocab, max_len: int, limit: int, seed: int = 0):
    """(every input, True) when there are at most `limit`; else (`limit` random ones, False)."""
    total = sum(len(vocab) ** n for n in range(1, max_len + 1))
    if total <= limit:
        every = (
            list(xs) for n in range(1, max_len + 1) for xs in itertools.product(vocab, repeat=n)
        )
        return every, total, True
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=limit)
    sample = ([vocab[i] for i in rng.integers(0, len(vocab), size=n)] for n in lengths)
    return sample, total, False


def validate(program, compiled: CompiledProgram, limit: int = 100_000, keep: int = 20):
    """The compiled model against the interpreter on inputs up to compiled.max_len."""
    model = Transformer(compiled.cfg, compiled.tensors)
    batch, total, exhaustive = inputs(compiled.vocab, compiled.max_len, limit)
    result = Validation(total=total, exhaustive=exhaustive)
    by_length: dict[int, list] = {}
    for xs in batch:
        by_length.setdefault(len(xs), []).append(xs)
    for n, group in sorted(by_length.items()):
        for start in range(0, len(group), 512):
            chunk = group[start : start + 512]
            logits = model(np.array([compiled.encode(xs) for xs in chunk]))
            predicted = logits[:, 1:, :].argmax(-1)
            for xs, row in zip(chunk, predicted):
                got = [compiled.classes[c] for c in row]
                cause = ""
                try:
                    want = evaluate(program, xs)
                except Exception as e:  # the program itself fails on this input
                    want, cause = None, f"the program raises {type(e).__name__}: {e}"
                result.checked += 1
                if want is None or not all(same(g, w) for g, w in zip(got, want)):
                    if len(result.mismatches) < keep:
                        cause = cause or too_wide(program, xs)
                        result.mismatches.append(
                            {"input": xs, "model": got, "program": want, "cause": cause}
                        )
                    else:
                        result.mismatches.append({})
    return result
