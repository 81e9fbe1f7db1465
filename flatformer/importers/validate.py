"""An imported configuration and its tensors checked before anything is allocated from them,
with the limits `train` applies (`config.LIMITS`, `MAX_PARAMS`): every size a whole number in
its range, named by the source's own field; every tensor a float of a known dtype, finite, of
the shape the config gives; a safetensors header checked byte by byte before a tensor is made
from it. A source that fails any of these is one line naming the field or tensor, never a
traceback from NumPy, torch or safetensors.
"""

from __future__ import annotations

import math

import numpy as np

from ..store.checkpoints import MAX_HEADER_BYTES
from ..config import LIMITS, MAX_PARAMS
from ..errors import FlatformerError
from ..store.limits import number, whole
from ..store.read import parse_json, read_bytes

# A source file read whole: the largest model `train` makes in float64, four times over (a
# nanoGPT ckpt.pt also holds AdamW's two moments), with room for buffers and headers.
MAX_SOURCE_BYTES = 4 * 8 * MAX_PARAMS + (64 << 20)
FLOATS = ("float16", "bfloat16", "float32", "float64")
# Every safetensors dtype, by its header name: its NumPy type (None where NumPy has none) and
# its size in bytes, so a header's byte lengths can be checked whatever it holds.
ST_DTYPES = {
    "F16": ("<f2", 2),
    "BF16": (None, 2),
    "F32": ("<f4", 4),
    "F64": ("<f8", 8),
    "I8": ("i1", 1),
    "U8": ("u1", 1),
    "I16": ("<i2", 2),
    "U16": ("<u2", 2),
    "I32": ("<i4", 4),
    "U32": ("<u4", 4),
    "I64": ("<i8", 8),
    "U64": ("<u8", 8),
    "BOOL": ("?", 1),
    "F8_E4M3": (None, 1),
    "F8_E5M2": (None, 1),
    "C64": ("<c8", 8),
}


def size(where: str, field: str, value, engine_name: str) -> int:
    """A size from a source's config as an int in `train`'s range for `engine_name`. An
    integral float (JSON's 12.0) is its int; strings, booleans, 1e400 and NaN are refused."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    lo, hi = LIMITS[engine_name]
    return whole(f"{where}: {field}", value, lo, hi)


def sizes(config: dict, fields: dict[str, str], where: str) -> dict[str, int]:
    """`fields` maps the engine's size names to the source's field names; each must be there."""
    out = {}
    for engine_name, field in fields.items():
        if field not in config:
            raise FlatformerError(f"{where} lacks a size: {field}")
        out[engine_name] = size(where, field, config[field], engine_name)
    return out


def divides(where: str, heads_field: str, heads: int, width_field: str, width: int) -> int:
    """The head size, when `heads` divides `width` (the fused Q, K, V split per head)."""
    if width % heads:
        raise FlatformerError(
            f"{where}: {width_field} {width} is not a multiple of {heads_field} {heads}"
        )
    return width // heads


def params(where: str, n_params: int) -> None:
    """Refuse a model larger than `train` makes, from its sizes, before a tensor is read."""
    if n_params > MAX_PARAMS:
        raise FlatformerError(
            f"{where}: {n_params:,} parameters; flatformer is made for models of at most "
            f"{MAX_PARAMS:,}"
        )


def flag(where: str, field: str, value) -> bool:
    if not isinstance(value, bool):
        raise FlatformerError(f"{where}: {field} must be true or false, got {value!r:.40}")
    return value


def eps(where: str, field: str, value) -> float:
    """A LayerNorm epsilon as a number (a string "1e-5" is a mistake, not a number)."""
    return number(f"{where}: {field}", value, 0.0, 1.0)


def state_dict(obj, where: str) -> dict:
    """A mapping from names (str) to tensors (torch or NumPy), or one line."""
    if not isinstance(obj, dict):
        raise FlatformerError(
            f"{where}: not a state dict (a mapping from names to tensors), a {type(obj).__name__}"
        )
    for key, value in obj.items():
        if not isinstance(key, str):
            raise FlatformerError(f"{where}: a tensor name that is not a string: {key!r:.60}")
        if not (isinstance(value, np.ndarray) or _is_torch_tensor(value)):
            raise FlatformerError(f"{where}: {key!r:.80} is a {type(value).__name__}, not a tensor")
    return obj


def _is_torch_tensor(value) -> bool:
    # torch is only imported by the caller that loaded a PyTorch file
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def array(tensor, name: str) -> np.ndarray:
    """A weight as NumPy: float32 stays float32, float16/bfloat16/float64 become float64 (the
    engine's), after its dtype and finiteness are checked. Complex, integer and boolean
    tensors are refused by name (a complex weight would lose its imaginary part)."""
    if _is_torch_tensor(tensor):
        tensor = _torch_as_numpy(tensor, name)
    a = np.asarray(tensor)
    if a.dtype.name not in FLOATS:
        raise FlatformerError(
            f"cannot import: tensor {name} is {a.dtype.name}; weights must be {', '.join(FLOATS)}"
        )
    if not np.isfinite(a).all():
        raise FlatformerError(f"cannot import: tensor {name} holds NaN or infinite values")
    return a.astype(np.float32 if a.dtype == np.float32 else np.float64)


def _torch_as_numpy(tensor, name: str) -> np.ndarray:
    import torch

    if tensor.layout != torch.strided:
        raise FlatformerError(f"cannot import: tensor {name} is {tensor.layout}, not dense")
    if tensor.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
        tensor = tensor.float()
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in FLOATS:
        raise FlatformerError(
            f"cannot import: tensor {name} is {dtype}; weights must be {', '.join(FLOATS)}"
        )
    return tensor.detach().cpu().numpy()


def shape(name: str, tensor, expected: tuple, where: str) -> None:
    """A source tensor's shape against the config's, checked before it is reshaped."""
    got = tuple(np.shape(tensor))
    if got != tuple(expected):
        raise FlatformerError(f"{where}: tensor {name} has shape {got}, the config says {expected}")


def read_safetensors(path) -> dict[str, np.ndarray]:
    """A safetensors file's tensors, its header checked before any is made (see `header`).
    BF16 is widened to float32 here (NumPy has no bfloat16); other dtypes NumPy lacks are
    refused by name when a weight needs them."""
    data = read_bytes(path, "safetensors file", MAX_SOURCE_BYTES)
    entries, start = header(data, f"{path}")
    out = {}
    for name, (dtype, dims, begin, end) in entries.items():
        numpy_type, _ = ST_DTYPES[dtype]
        raw = data[start + begin : start + end]
        if dtype == "BF16":
            bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(dims)
        elif numpy_type is None:
            raise FlatformerError(f"{path}: tensor {name} is {dtype}, which is not imported")
        else:
            out[name] = np.frombuffer(raw, numpy_type).reshape(dims).copy()  # writable
    return out


def header(data: bytes, where: str) -> tuple[dict, int]:
    """The tensors a safetensors file's header lists, as name -> (dtype, shape, begin, end)
    with offsets into the data, and where the data starts. Checked: the 8-byte little-endian
    length within MAX_HEADER_BYTES and the file, JSON of at most 64 levels, every dtype known,
    every shape a list of whole numbers whose bytes are its offsets' span, every span inside
    the data and none overlapping another."""
    if len(data) < 8:
        raise FlatformerError(f"{where}: {len(data)} bytes, too short for a safetensors header")
    n = int.from_bytes(data[:8], "little")
    if not 2 <= n <= min(MAX_HEADER_BYTES, len(data) - 8):
        raise FlatformerError(
            f"{where}: its header length field says {n:,} bytes in a {len(data):,}-byte file "
            f"(at most {MAX_HEADER_BYTES:,})"
        )
    try:
        text = data[8 : 8 + n].decode("utf-8")
    except UnicodeDecodeError:
        raise FlatformerError(f"{where}: its safetensors header is not UTF-8") from None
    listed = parse_json(text, f"{where}: its safetensors header")
    if not isinstance(listed, dict):
        raise FlatformerError(f"{where}: its safetensors header is not an object")
    body = len(data) - 8 - n
    entries = {
        name: entry(name, info, body, where)
        for name, info in listed.items()
        if name != "__metadata__"
    }
    spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items())
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
        if begin < end:
            raise FlatformerError(f"{where}: tensors {first} and {second} overlap")
    return entries, 8 + n


def entry(name: str, info, body: int, where: str) -> tuple[str, tuple, int, int]:
    """One header entry checked: its dtype, shape and data offsets within `body` bytes."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise FlatformerError(
            f"{where}: header entry {name!r:.80} is not {{dtype, shape, data_offsets}}"
        )
    dtype, dims, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ST_DTYPES:
        raise FlatformerError(f"{where}: tensor {name} has an unknown dtype {dtype!r:.40}")
    if not isinstance(dims, list) or not all(_whole(n) for n in dims):
        raise FlatformerError(f"{where}: tensor {name}'s shape {dims!r:.80} is not whole numbers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_whole, offsets))):
        raise FlatformerError(f"{where}: tensor {name}'s data_offsets are not two whole numbers")
    begin, end = offsets
    if not begin <= end <= body:
        raise FlatformerError(
            f"{where}: tensor {name}'s data_offsets {begin:,}..{end:,} lie outside the "
            f"{body:,} bytes of data"
        )
    expected = math.prod(dims) * ST_DTYPES[dtype][1]
    if end - begin != expected:
        raise FlatformerError(
            f"{where}: tensor {name} of shape {dims} and dtype {dtype} needs {expected:,} "
            f"bytes, its data_offsets give {end - begin:,}"
        )
    return dtype, tuple(dims), begin, end


def _whole(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0
