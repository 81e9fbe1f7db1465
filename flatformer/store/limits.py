"""Validation at the edge: every number a user hands us is checked against its valid range
before any work starts, and the refusal names the range (paths and files: store/). Library code calls these where
a value first arrives (an option, a --set key, a field of a file), never the standard library
with an unchecked value.
"""

from __future__ import annotations

import json
import math
import os

from ..errors import FlatformerError

MAX_SEED = 2**32 - 1  # seeds name NumPy generators; larger ones name nothing new
MAX_SEEDS = 10_000  # seeds trained in one batched program (the memory check says more)
MAX_STEPS = 10_000_000  # 2,000x the paper's run
MAX_TOKENS = 10_000  # tokens one `generate` call samples
MAX_PORT = 65_535


def whole(name: str, value, lo: int, hi: int, hint: str = "") -> int:
    """`value` as an int in lo..hi, or a one-line refusal naming the range."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise FlatformerError(
            f"{name} must be a whole number in {lo:,}..{hi:,}{hint}, got {value!r}"
        )
    return value


def number(name: str, value, lo: float, hi: float, hint: str = "") -> float:
    """`value` as a finite float in [lo, hi] (NaN and infinities refused)."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not lo <= value <= hi
    ):
        raise FlatformerError(f"{name} must be a number in [{lo:g}, {hi:g}]{hint}, got {value!r}")
    return float(value)


def processes(name: str, value: int) -> int:
    """A count of worker processes: 1 .. 4x the cores (more only thrash the machine)."""
    return whole(name, value, 1, 4 * (os.cpu_count() or 1), " (4x this machine's cores)")


def port(value: int) -> int:
    return whole("--port", value, 0, MAX_PORT, " (0: any free port)")


def finite_json(value, where: str = "", bad: list | None = None):
    """`value` with every NaN or infinity replaced by None; their places appended to `bad`."""
    if isinstance(value, float) and not math.isfinite(value):
        if bad is not None:
            bad.append(f"{where or 'value'}: {value}")
        return None
    if isinstance(value, dict):
        return {
            k: finite_json(v, f"{where}.{k}" if where else str(k), bad) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [finite_json(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def strict_json(value, **options) -> str:
    """JSON that every parser accepts (allow_nan=False): a NaN or infinity becomes null, and a
    top-level object gains "non_finite", the list of what was replaced and why."""
    bad: list = []
    clean = finite_json(value, "", bad)
    if bad and isinstance(clean, dict):
        clean["non_finite"] = [f"{b} (not a finite number; written as null)" for b in bad]
    return json.dumps(clean, allow_nan=False, **options)
