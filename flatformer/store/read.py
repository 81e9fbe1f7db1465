"""The one reader of files from outside (a run folder handed over, a checkpoint to import, a
prompts or stimuli file): regular files only, checked on the open descriptor after a
non-blocking open (a FIFO is refused, not waited on; a device behind a link is not read), a
size limit before a byte is read, JSON nesting counted before parsing, undecodable bytes named
by offset, array headers checked before their values are allocated. Every failure is one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import stat
from pathlib import Path

from ..errors import FlatformerError


@contextlib.contextmanager
def open_regular(path, what: str, max_bytes: int):
    """A binary file object on `path`, a regular file of at most `max_bytes`, for readers that
    stream (hashes, NumPy's and SciPy's loaders). The check is on the open descriptor, so a
    file swapped for a FIFO between a check and the read is still caught."""
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
            yield f
    except OSError as exc:
        raise FlatformerError(f"{what} {path} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_bytes(path, what: str, max_bytes: int) -> bytes:
    """A file we read whole, checked before a byte is read (`open_regular`)."""
    with open_regular(path, what, max_bytes) as f:
        data = f.read(os.fstat(f.fileno()).st_size)  # not max_bytes: read() allocates that
        if f.read(1):  # it grew after the check
            raise FlatformerError(f"{what} {path} changed while it was read")
    return data


def read_text(path, what: str, max_bytes: int) -> str:
    """A small UTF-8 text file we read whole (a config, prompts, a sweep file)."""
    return decode(read_bytes(path, what, max_bytes), f"{what} {path}")


def decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlatformerError(f"{where} is not UTF-8 text (byte at offset {exc.start})") from None


def sha256(path, what: str, max_bytes: int) -> str:
    digest = hashlib.sha256()
    with open_regular(path, what, max_bytes) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


MAX_JSON_DEPTH = 64  # nesting no file of ours comes near; deeper is refused before parsing
STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest bracket nesting in `text`, counted outside strings, without recursion."""
    depth = deepest = 0
    for match in BRACKET.finditer(STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(text: str, where: str, allow_nan: bool = False):
    """JSON from outside, or one line: nesting deeper than MAX_JSON_DEPTH refused before
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


def _npy(f, where: str, max_values: int):
    """One .npy array from `f`, its header checked before the values are allocated: a header
    may declare any shape, and NumPy allocates what it declares before reading."""
    import numpy as np
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version} is not read")
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = reader(f)
        values = math.prod(shape)
        if values > max_values:
            raise FlatformerError(
                f"{where}: its header declares {values:,} values; at most {max_values:,} are read"
            )
        if dtype.hasobject:
            raise ValueError("it holds Python objects (pickles are never loaded)")
        data = bytearray(values * dtype.itemsize)  # writable, unlike bytes
        if f.readinto(data) != len(data) or f.read(1):
            raise ValueError("its data is not the size its header declares")
        array = np.frombuffer(data, dtype)
        return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)
    except FlatformerError:
        raise
    except (ValueError, OSError, EOFError, TypeError, SyntaxError) as exc:
        raise FlatformerError(f"{where}: cannot read it as a .npy array ({exc})") from None


def read_npy(path, what: str, max_values: int, max_bytes: int):
    with open_regular(path, what, max_bytes) as f:
        return _npy(f, f"{what} {path}", max_values)


def read_npz(path, what: str, max_values: int, max_bytes: int) -> dict:
    """Every array of a .npz (a zip of .npy files), at most `max_values` values in all."""
    import zipfile

    where = f"{what} {path}"
    arrays = {}
    with open_regular(path, what, max_bytes) as f:
        try:
            with zipfile.ZipFile(f) as z:
                for name in z.namelist():
                    with z.open(name) as member:
                        left = max_values - sum(a.size for a in arrays.values())
                        arrays[name.removesuffix(".npy")] = _npy(member, where, left)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
            raise FlatformerError(f"{where}: cannot read it as a .npz file ({exc})") from None
    return arrays


def read_mat(path, what: str, max_bytes: int) -> dict:
    """A MATLAB file's variables through scipy.io.loadmat (numbers only, no code run)."""
    from scipy.io import loadmat

    with open_regular(path, what, max_bytes) as f:
        try:
            return loadmat(f)
        except MemoryError:
            raise FlatformerError(f"{what} {path}: declares more data than memory holds") from None
        except Exception as exc:  # scipy, zlib and struct each raise their own on a bad file
            first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
            raise FlatformerError(
                f"{what} {path}: not a readable .mat file ({type(exc).__name__}: {first})"
            ) from None


def text_stream(path, what: str, max_bytes: int) -> io.StringIO:
    """A text file read whole, for parsers that take a file object (CSV)."""
    return io.StringIO(read_text(path, what, max_bytes))
