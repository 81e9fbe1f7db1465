"""nanoGPT's `meta.pkl` read by an unpickler that builds nothing but plain data."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from ..errors import FlatformerError
from ..store.read import read_bytes

MAX_BYTES = 16 << 20


class PlainUnpickler(pickle.Unpickler):
    """Admits dicts, lists, tuples, strings, numbers, booleans and None (pickle builds these
    without naming a class); any class or function a file names is refused."""

    def find_class(self, module, name):
        raise FlatformerError(
            f"meta.pkl names {module}.{name}: only plain dicts, lists, strings and numbers are read"
        )


def read_meta(path: Path) -> list[str]:
    """The characters of a nanoGPT meta.pkl (`itos`: id -> character), in id order."""
    path = Path(path)
    data = read_bytes(path, "meta.pkl", MAX_BYTES)
    try:
        meta = PlainUnpickler(io.BytesIO(data)).load()
    except FlatformerError:
        raise
    except Exception as exc:
        raise FlatformerError(f"{path}: not a readable meta.pkl ({type(exc).__name__})") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if (
        not isinstance(itos, dict)
        or sorted(itos) != list(range(len(itos)))
        or not all(isinstance(c, str) for c in itos.values())
    ):
        raise FlatformerError(f"{path}: meta.pkl needs itos, a dict from ids 0..V-1 to strings")
    chars = [itos[i] for i in range(len(itos))]
    if len(set(chars)) != len(chars):
        raise FlatformerError(f"{path}: meta.pkl's itos repeats a character")
    return chars
