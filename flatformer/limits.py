"""Validation at the edge: every number or path a user hands us is checked against its valid
range before any work starts, and the refusal names the range. Library code calls these where
a value first arrives (an option, a --set key, a field of a file), never the standard library
with an unchecked value.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

from .errors import FlatformerError

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


def output_file(path, what: str) -> Path:
    """A file we are about to write: its folder must exist and it must not be a folder."""
    path = Path(path)
    if path.is_symlink():
        raise FlatformerError(
            f"{what} {path} is a symbolic link; give the file it points to "
            f"({os.path.realpath(path)}) or a new name"
        )
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


def read_bytes(path, what: str, max_bytes: int) -> bytes:
    """A file we read whole, checked before a byte is read: a regular file (a FIFO would hang
    the read, a device never ends), at most `max_bytes`. Opened without blocking and checked
    on the open descriptor, so a file swapped between the check and the read is still caught."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FlatformerError(f"{what} {path} does not exist or is not a file") from None
    except OSError as exc:
        raise FlatformerError(f"{what} {path} cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FlatformerError(f"{what} {path} does not exist or is not a file")
        if info.st_size > max_bytes:
            raise FlatformerError(
                f"{what} {path} is {info.st_size:,} bytes; at most {max_bytes:,} are read"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(info.st_size)
            if f.read(1):  # it grew after the check
                raise FlatformerError(f"{what} {path} changed while it was read")
        return data
    except OSError as exc:
        raise FlatformerError(f"{what} {path} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_text(path, what: str, max_bytes: int) -> str:
    """A small UTF-8 text file we read whole (a config, prompts, a sweep file)."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlatformerError(
            f"{what} {path} is not UTF-8 text (byte at offset {exc.start})"
        ) from None


MAX_JSON_DEPTH = 64  # nesting no file of ours comes near; deeper is refused before parsing


def json_depth(text: str) -> int:
    """The deepest bracket nesting in `text`, counted outside strings (an upper bound is all
    the check needs: brackets inside strings only count when quotes are unbalanced)."""
    depth = deepest = 0
    for piece in text.split('"')[::2]:  # outside strings, near enough for a limit
        for ch in piece:
            if ch in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in "]}":
                depth -= 1
    return deepest


def parse_json(text: str, where: str, allow_nan: bool = False):
    """JSON from a file of ours, or one line: nesting deeper than MAX_JSON_DEPTH refused before
    parsing (no RecursionError); NaN and Infinity refused unless `allow_nan` (a diverged
    run's metrics rows hold them)."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise FlatformerError(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep")

    def no_constant(name):
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text, parse_constant=None if allow_nan else no_constant)
    except (ValueError, RecursionError) as exc:
        raise FlatformerError(
            f"{where} is not valid JSON: {str(exc).splitlines()[0][:200]}"
        ) from None


def read_json(path, what: str, max_bytes: int):
    return parse_json(read_text(path, what, max_bytes), f"{what} {path}")


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
