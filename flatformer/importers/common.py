"""What every importer returns, and the checks they share."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import LN_EPS, MAX_PARAMS, ModelConfig
from ..errors import FlatformerError
from ..store import read


@dataclass
class Imported:
    """A model read from another framework: its config, tensors (TransformerLens names, float64
    or the source's float32), its vocabulary if it came with one, and what the import did."""

    cfg: ModelConfig
    tensors: dict[str, np.ndarray]
    vocab: list[str] | None = None
    provenance: dict = field(default_factory=dict)


# Weights and two optimizer moments of the largest model the engine takes, in float64 (a
# nanoGPT ckpt.pt holds AdamW's moments beside the weights), with room for the rest.
MAX_SOURCE_BYTES = 3 * 8 * MAX_PARAMS + (64 << 20)


def sha256(path: Path) -> str:
    return read.sha256(path, "source", MAX_SOURCE_BYTES)


def refuse(field_name: str, value, what: str):
    """One line naming the source's field and value the engine does not have."""
    raise FlatformerError(
        f"cannot import: {field_name} = {value!r} ({what}); flatformer's engine does not have it"
    )


def check_ln_eps(field_name: str, eps: float):
    if abs(float(eps) - LN_EPS) > 1e-12:
        refuse(field_name, eps, f"a LayerNorm epsilon other than the engine's {LN_EPS:g}")


def torch_state(path: Path) -> dict:
    """A PyTorch file read with weights_only=True: tensors and plain containers, no code."""
    try:
        import torch
    except ImportError:
        raise FlatformerError(
            f"{path}: reading a PyTorch file needs torch: pip install 'flatformer[torch]'"
        ) from None
    data = read.read_bytes(path, "PyTorch file", MAX_SOURCE_BYTES)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses any object it would have to construct
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FlatformerError(
            f"{path}: not a loadable weights-only PyTorch file: {first[:200]}"
        ) from None


def as_array(tensor) -> np.ndarray:
    """A torch tensor (or array) as NumPy, float64 unless the source is float32."""
    array = tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)
    return array.astype(np.float32 if array.dtype == np.float32 else np.float64)
