"""What every importer returns, and the checks they share."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import LN_EPS, ModelConfig
from ..errors import FlatformerError


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
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def refuse(field_name: str, value, what: str):
    """One line naming the source's field and value the engine does not have."""
    raise FlatformerError(
        f"cannot import: {field_name} = {value!r} ({what}); flatformer's engine does not have it"
    )


def check_ln_eps(field_name: str, eps: float):
    if abs(float(eps) / LN_EPS - 1) > 1e-6:  # float32's rounding of 1e-5 is the same epsilon
        refuse(field_name, eps, f"a LayerNorm epsilon other than the engine's {LN_EPS:g}")


def torch_state(path: Path) -> dict:
    """A PyTorch file read with weights_only=True: tensors and plain containers, no code."""
    try:
        import torch
    except ImportError:
        raise FlatformerError(
            f"{path}: reading a PyTorch file needs torch: pip install 'flatformer[torch]'"
        ) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses any object it would have to construct
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FlatformerError(
            f"{path}: not a loadable weights-only PyTorch file: {first[:200]}"
        ) from None


def as_array(tensor) -> np.ndarray:
    """A torch tensor (or array) as NumPy, float64 unless the source is float32."""
    array = tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)
    return array.astype(np.float32 if array.dtype == np.float32 else np.float64)
