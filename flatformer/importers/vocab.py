"""nanoGPT's `meta.pkl` read by an unpickler that builds nothing but plain data."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from ..errors import FlatformerError
from ..store.read import read_bytes
from ..tasks.corpus import char_name

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
        or not all(type(i) is int for i in itos)  # mixed key types cannot even be sorted
        or sorted(itos) != list(range(len(itos)))
        or not all(isinstance(c, str) and len(c) == 1 for c in itos.values())
    ):
        raise FlatformerError(
            f"{path}: meta.pkl needs itos, a dict from ids 0..V-1 to single characters"
        )
    chars = [itos[i] for i in range(len(itos))]
    # The run shows whitespace by its visible name (a space as ␣): a character and the name
    # of another would be one token twice, in a run no command could open.
    shown = [char_name(c) for c in chars]
    if len(set(shown)) != len(shown):
        raise FlatformerError(
            f"{path}: meta.pkl's itos repeats a character, or holds whitespace and its "
            "visible name (␣ ⏎ ⇥) both"
        )
    return chars
