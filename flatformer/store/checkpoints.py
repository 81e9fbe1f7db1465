"""The checkpoint format, written and read here only (where the files lie: store/layout.py), each
one seed's weights under their TransformerLens names (float64, whatever the training dtype)
and its optimizer state under "optim." (AdamW's moments, its step count, the candidate init it
came from, the running training loss), for --resume. Safetensors: loading one never executes
code. `Snapshot` is every member's state in memory, as a trainer holds it; `CheckpointLayout`
writes many seeds' files from one array with the bytes `checkpoint_bytes` gives."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from ..config import MAX_PARAMS, ModelConfig
from ..engine.model import Params
from ..errors import FlatformerError
from .read import open_regular

# Weights and two optimizer moments of the largest model the config allows, with room for the
# header and counters: a bigger file is refused before it is read.
MAX_CHECKPOINT_BYTES = 3 * 8 * MAX_PARAMS + 2**20
MAX_HEADER_BYTES = 2**20


def checkpoint_bytes(
    tensors: dict[str, np.ndarray], optim: dict[str, np.ndarray] | None = None
) -> bytes:
    """A checkpoint file's bytes: the weights under their TransformerLens names, plus the
    optimizer moments for --resume."""
    data = {name: np.ascontiguousarray(t) for name, t in tensors.items()}
    for name, t in (optim or {}).items():
        data["optim." + name] = np.ascontiguousarray(t)
    return st_save(data, metadata={"format": "flatformer-1"})


class CheckpointLayout:
    """Where each tensor lies in checkpoints that all hold the same float64 tensors: the
    safetensors header is the same for all of them, and the data the tensors in one order, so
    a trainer writes many seeds' checkpoints from one (seeds, numbers) array, with exactly the
    bytes checkpoint_bytes gives."""

    def __init__(self, shapes: dict[str, tuple]):
        template = checkpoint_bytes({name: np.zeros(shape) for name, shape in shapes.items()})
        n = int.from_bytes(template[:8], "little")
        header = json.loads(template[8 : 8 + n])
        self.prefix = template[: 8 + n]
        entries = sorted(
            (info["data_offsets"][0], name)
            for name, info in header.items()
            if name != "__metadata__"
        )
        self.order = [name for _, name in entries]  # the data's order in the file
        assert len(template) == 8 + n + 8 * sum(math.prod(s) for s in shapes.values())

    def to_bytes(self, row: np.ndarray) -> bytes:
        """One checkpoint from its row: every tensor in `order`, raveled, float64."""
        return self.prefix + np.ascontiguousarray(row, dtype="<f8").tobytes()


def read_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(weights, optimizer state) from a checkpoint file, with one-line errors for bad files.
    The file's size is checked against the largest model there can be before it is read, the
    header's length (its first 8 bytes) against the file before it is parsed."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():  # a run's checkpoints are its own files
        raise FlatformerError(f"checkpoint {path} does not exist or is not a regular file")
    with open_regular(path, "checkpoint", MAX_CHECKPOINT_BYTES) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        header = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < header <= min(size - 8, MAX_HEADER_BYTES):
            raise FlatformerError(
                f"checkpoint {path} is not a readable safetensors file "
                f"(truncated or corrupt?): its header length field says "
                f"{header:,} bytes in a {size:,}-byte file"
            )
        f.seek(0)
        data = f.read(size)
    try:
        data = st_load(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise FlatformerError(
            f"checkpoint {path} is not a readable safetensors file "
            f"(truncated or corrupt?): {str(exc).splitlines()[0]}"
        ) from None
    weights = {k: v for k, v in data.items() if not k.startswith("optim.")}
    optim = {k[6:]: v for k, v in data.items() if k.startswith("optim.")}
    for name, t in data.items():
        if t.dtype != np.float64 or not np.all(np.isfinite(t)):
            raise FlatformerError(f"checkpoint {path}: tensor {name} is not finite float64")
    return weights, optim


def check_optim(path: Path, optim: dict[str, np.ndarray], n_params: int):
    """The optimizer state a resume reads: the moments of every parameter and the counters."""
    sizes = {"m": n_params, "v": n_params, "t": 1, "candidate": 1, "loss_sum": 1, "loss_n": 1}
    for key, n in sizes.items():
        if key not in optim or optim[key].shape != (n,):
            raise FlatformerError(
                f"checkpoint {path}: optimizer state {key!r} is missing or "
                f"not {n} numbers: it cannot be resumed from"
            )


@lru_cache(maxsize=16)
def checkpoint_layout(cfg: ModelConfig) -> CheckpointLayout:
    """Where each tensor lies in this model's checkpoint files (Snapshot.checkpoint's)."""
    n = cfg.n_params
    return CheckpointLayout(
        {
            **cfg.param_shapes(),
            "optim.m": (n,),
            "optim.v": (n,),
            **{f"optim.{key}": (1,) for key in ("t", "candidate", "loss_sum", "loss_n")},
        }
    )


@dataclass
class Snapshot:
    """Every member's weights and optimizer state at one step, with the running training loss
    (so that a resumed or joined run writes the same metrics)."""

    members: list[tuple[int, int]]  # (seed, candidate) of each member, in order
    params: np.ndarray  # the flat buffers of Params and AdamW
    m: np.ndarray
    v: np.ndarray
    t: int
    loss_sum: np.ndarray
    loss_n: int

    def subset(self, cfg: ModelConfig, chosen: list[int]) -> "Snapshot":
        """Only the members at indices `chosen`, in that order."""
        n = len(self.members)
        params, m, v = (
            Params(cfg, n, buf).select(chosen).flat for buf in (self.params, self.m, self.v)
        )
        return Snapshot(
            [self.members[i] for i in chosen],
            params,
            m,
            v,
            self.t,
            self.loss_sum[chosen],
            self.loss_n,
        )

    @classmethod
    def join(cls, cfg: ModelConfig, parts: list["Snapshot"]) -> "Snapshot":
        """The members of several snapshots taken at the same step, one after another."""

        def joined(get):
            return Params.from_members(
                cfg,
                [row for p in parts for row in Params(cfg, len(p.members), get(p)).members()],
                get(parts[0]).dtype,
            ).flat

        return cls(
            [m for p in parts for m in p.members],
            joined(lambda p: p.params),
            joined(lambda p: p.m),
            joined(lambda p: p.v),
            parts[0].t,
            np.concatenate([p.loss_sum for p in parts]),
            parts[0].loss_n,
        )

    def checkpoint(self, cfg: ModelConfig, i: int) -> tuple[dict, dict]:
        """Member i's weights and optimizer state as a checkpoint holds them (float64 whatever
        the training dtype)."""
        n = len(self.members)
        m, v = (Params(cfg, n, buf).member(i).astype(np.float64) for buf in (self.m, self.v))
        optim = {
            "m": m,
            "v": v,
            "t": np.array([float(self.t)]),
            "candidate": np.array([float(self.members[i][1])]),
            "loss_sum": np.array([self.loss_sum[i]]),
            "loss_n": np.array([float(self.loss_n)]),
        }
        weights = {k: w.astype(np.float64) for k, w in Params(cfg, n, self.params).seed(i).items()}
        return weights, optim

    def checkpoint_rows(self, cfg: ModelConfig, order: list[str]) -> np.ndarray:
        """`checkpoint` of every member at once: one row of float64 numbers each, the tensors
        (the optimizer's as "optim.<key>") raveled in `order`."""
        n = len(self.members)
        weights = Params(cfg, n, self.params)
        columns = {
            **{name: view.reshape(n, -1) for name, view in weights.views.items()},
            "optim.m": Params(cfg, n, self.m).members(),
            "optim.v": Params(cfg, n, self.v).members(),
            "optim.t": np.full(n, float(self.t)),
            "optim.candidate": np.array([float(c) for _, c in self.members]),
            "optim.loss_sum": self.loss_sum,
            "optim.loss_n": np.full(n, float(self.loss_n)),
        }
        return np.concatenate(
            [np.asarray(columns[name], dtype=np.float64).reshape(n, -1) for name in order], axis=1
        )

    @classmethod
    def from_checkpoints(
        cls, cfg: ModelConfig, seeds: list[int], states: list[tuple[dict, dict]], dtype
    ) -> "Snapshot":
        """The inverse of `checkpoint`, one checkpoint per seed."""
        params = Params.stack(cfg, [w for w, _ in states]).flat.astype(dtype)
        m, v = (
            Params.from_members(cfg, [o[key] for _, o in states], dtype).flat for key in ("m", "v")
        )
        optims = [o for _, o in states]
        return cls(
            [(s, int(o["candidate"][0])) for s, o in zip(seeds, optims)],
            params,
            m,
            v,
            int(optims[0]["t"][0]),
            np.array([o["loss_sum"][0] for o in optims]),
            int(optims[0]["loss_n"][0]),
        )
