"""What every importer returns, and the checks they share."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import LN_EPS, ModelConfig
from ..errors import FlatformerError
from ..store import read
from . import validate


@dataclass
class Imported:
    """A model read from another framework: its config, tensors (TransformerLens names, float64
    or the source's float32), its tokenizer (tokenizer.json text) if it came with one, and what
    the import did."""

    cfg: ModelConfig
    tensors: dict[str, np.ndarray]
    tokenizer: str | None = None
    provenance: dict = field(default_factory=dict)


def sha256(path: Path) -> str:
    return read.sha256(path, "source", validate.MAX_SOURCE_BYTES)


def refuse(field_name: str, value, what: str):
    """One line naming the source's field and value the engine does not have."""
    raise FlatformerError(
        f"cannot import: {field_name} = {value!r} ({what}); flatformer's engine does not have it"
    )


def check_ln_eps(field_name: str, eps, where: str = "config"):
    # Relative: float32's rounding of 1e-5 is the same epsilon.
    if abs(validate.eps(where, field_name, eps) / LN_EPS - 1) > 1e-6:
        refuse(field_name, eps, f"a LayerNorm epsilon other than the engine's {LN_EPS:g}")


def torch_state(path: Path):
    """A PyTorch file read with weights_only=True: tensors and plain containers, no code. Read
    whole through the size-capped reader first (a FIFO or a 100 GB file is refused unread)."""
    try:
        import torch
    except ImportError:
        raise FlatformerError(
            f"{path}: reading a PyTorch file needs torch: pip install 'flatformer[torch]'"
        ) from None
    data = read.read_bytes(path, "PyTorch file", validate.MAX_SOURCE_BYTES)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses any object it would have to construct
        raise FlatformerError(
            f"{path}: not a loadable weights-only PyTorch file: {why(exc)}"
        ) from None


def why(exc: Exception) -> str:
    """torch's refusal in our words. Its message opens with the advice to load with
    weights_only=False, which runs code from the file: never quoted; the object it names is."""
    named = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    if named:
        return (
            f"it names {named.group(1)}, which only running code from the file could build, "
            "and that is never done"
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "weights_only" in first or "Weights only" in first:
        return "it holds an object only running code from the file could build"
    return f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__


def as_array(tensor, name: str) -> np.ndarray:
    """A weight as NumPy, checked (dtype, finiteness): float64 unless the source is float32."""
    return validate.array(tensor, name)
