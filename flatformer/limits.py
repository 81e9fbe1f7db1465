"""Validation at the edge: every number or path a user hands us is checked against its valid
range before any work starts, and the refusal names the range. Library code calls these where
a value first arrives (an option, a --set key, a field of a file), never the standard library
with an unchecked value.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import FlatformerError

MAX_SEED = 2**32 - 1         # seeds name NumPy generators; larger ones name nothing new
MAX_SEEDS = 10_000           # seeds trained in one batched program (the memory check says more)
MAX_STEPS = 10_000_000       # 2,000x the paper's run
MAX_TOKENS = 10_000          # tokens one `generate` call samples
MAX_PORT = 65_535


def whole(name: str, value, lo: int, hi: int, hint: str = "") -> int:
    """`value` as an int in lo..hi, or a one-line refusal naming the range."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise FlatformerError(f"{name} must be a whole number in {lo:,}..{hi:,}{hint}, "
                              f"got {value!r}")
    return value


def number(name: str, value, lo: float, hi: float, hint: str = "") -> float:
    """`value` as a finite float in [lo, hi] (NaN and infinities refused)."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or not lo <= value <= hi):
        raise FlatformerError(f"{name} must be a number in [{lo:g}, {hi:g}]{hint}, "
                              f"got {value!r}")
    return float(value)


def processes(name: str, value: int) -> int:
    """A count of worker processes: 1 .. 4x the cores (more only thrash the machine)."""
    return whole(name, value, 1, 4 * (os.cpu_count() or 1), " (4x this machine's cores)")


def port(value: int) -> int:
    return whole("--port", value, 0, MAX_PORT, " (0: any free port)")


def output_file(path, what: str) -> Path:
    """A file we are about to write: its folder must exist and it must not be a folder."""
    path = Path(path)
    if path.is_dir():
        raise FlatformerError(f"{what} {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise FlatformerError(f"folder {path.parent} does not exist")
    return path


def output_folder(path, what: str) -> Path:
    """A folder we are about to create or write into: not an existing file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FlatformerError(f"{what} {path} is a file, not a folder")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise FlatformerError(f"{what} {path}: {parent} is a file, not a folder")
    return path


def read_text(path, what: str, max_bytes: int) -> str:
    """A small UTF-8 text file we read whole (a config, prompts, a sweep file)."""
    path = Path(path)
    if not path.is_file():
        raise FlatformerError(f"{what} {path} does not exist or is not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise FlatformerError(f"{what} {path} is {size:,} bytes; at most {max_bytes:,} "
                              f"are read")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlatformerError(f"{what} {path} is not UTF-8 text (byte at offset "
                              f"{exc.start})") from None
