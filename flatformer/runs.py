"""Run folders on disk: config.json, metrics.jsonl and checkpoints/step_XXXXXX.safetensors.

Files are written atomically (a temporary file, then rename), so a killed process never leaves a
half-written one behind; the one exception, metrics.jsonl's new rows, is appended, and a line a
kill cut short ends what `read_metrics` reads (a resumed run rewrites the file whole).
Checkpoints are safetensors: loading one never executes code.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from .config import MAX_PARAMS, ModelConfig
from .errors import FlatformerError
from .limits import MAX_SEED, read_text, whole
from .transformer import Transformer

CHECKPOINT = re.compile(r"^step_(\d{6,})\.safetensors$")
# Weights and two optimizer moments of the largest model the config allows, with room for the
# header and counters: a bigger file is refused before it is read.
MAX_CHECKPOINT_BYTES = 3 * 8 * MAX_PARAMS + 2**20
MAX_HEADER_BYTES = 2**20
METRICS = ("train_loss", "val_loss", "rule_error")  # with "step", in every metrics row
MAX_CONFIG_BYTES = 16_000_000   # a corpus run's config holds its text (at most 2 MB of it)


class WriteFailed(FlatformerError):
    pass


def atomic_write(path: str | Path, data: bytes):
    """Write a temporary file, then rename it over `path`: a kill or a failed write (a full
    disk) leaves the previous version whole. Not fsync'ed: that survives any crash of the
    process, not a power cut, and costs about 5 ms a file here (1.5 s for a default run).
    Plain strings, not pathlib, inside: a 64-seed run writes 13,000 files."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise WriteFailed(f"could not write {path} ({exc.strerror or exc}); the version "
                          f"before it is intact") from None


def append_write(path: str | Path, data: bytes):
    """Append to `path`; a failed write (a full disk) cuts the file back to what it held, so
    it never ends in half a line. Opened for each append: a run may write to thousands of
    seeds' files, more than a process may hold open (256 by default on macOS)."""
    path = os.fspath(path)
    try:
        with open(path, "ab") as f:
            size = f.tell()
            try:
                f.write(data)
                f.flush()
            except OSError:
                f.truncate(size)
                raise
    except OSError as exc:
        raise WriteFailed(f"could not write {path} ({exc.strerror or exc}); the version "
                          f"before it is intact") from None


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}.safetensors"


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / checkpoint_name(step)


def checkpoint_bytes(tensors: dict[str, np.ndarray],
                     optim: dict[str, np.ndarray] | None = None) -> bytes:
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
        header = json.loads(template[8:8 + n])
        self.prefix = template[:8 + n]
        entries = sorted((info["data_offsets"][0], name) for name, info in header.items()
                         if name != "__metadata__")
        self.order = [name for _, name in entries]   # the data's order in the file
        assert len(template) == 8 + n + 8 * sum(math.prod(s) for s in shapes.values())

    def to_bytes(self, row: np.ndarray) -> bytes:
        """One checkpoint from its row: every tensor in `order`, raveled, float64."""
        return self.prefix + np.ascontiguousarray(row, dtype="<f8").tobytes()


def read_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(weights, optimizer state) from a checkpoint file, with one-line errors for bad files.
    Sizes are checked before anything is read whole: the file against the largest model there
    can be, the header's length (its first 8 bytes) against the file."""
    path = Path(path)
    if not path.is_file():
        raise FlatformerError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    if size > MAX_CHECKPOINT_BYTES:
        raise FlatformerError(f"checkpoint {path} is {size:,} bytes, more than the largest model "
                              f"flatformer makes ({MAX_CHECKPOINT_BYTES:,})")
    with open(path, "rb") as f:
        head = f.read(8)
    header = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 0 < header <= min(size - 8, MAX_HEADER_BYTES):
        raise FlatformerError(f"checkpoint {path} is not a readable safetensors file "
                              f"(truncated or corrupt?): its header length field says "
                              f"{header:,} bytes in a {size:,}-byte file")
    try:
        data = st_load(path.read_bytes())
    except (SafetensorError, ValueError, OSError) as exc:
        raise FlatformerError(f"checkpoint {path} is not a readable safetensors file "
                              f"(truncated or corrupt?): {str(exc).splitlines()[0]}") from None
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
            raise FlatformerError(f"checkpoint {path}: optimizer state {key!r} is missing or "
                                  f"not {n} numbers: it cannot be resumed from")


@dataclass
class Run:
    """A trained run folder: its config, metrics and checkpoints."""

    path: Path
    config: dict
    cfg: ModelConfig
    _metrics: list | None = field(default=None, repr=False)

    @property
    def task(self):
        from .tasks import task_for_run
        return task_for_run(self.config)

    @property
    def vocab(self) -> list[str]:
        return self.config["vocab"]

    @property
    def steps(self) -> list[int]:
        """Steps with a checkpoint on disk, ascending."""
        folder = self.path / "checkpoints"
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for f in os.listdir(folder) if (m := CHECKPOINT.match(f)))

    def resolve_step(self, step: int | None) -> int:
        steps = self.steps
        if not steps:
            raise FlatformerError(f"run {self.path} has no checkpoints")
        if step is None:
            return steps[-1]
        if step not in steps:
            near = min(steps, key=lambda s: abs(s - step))
            raise FlatformerError(f"run {self.path} has no checkpoint at step {step} "
                                  f"(nearest: {near}; range {steps[0]}..{steps[-1]})")
        return step

    def data(self):
        """The task's training and held-out data (`data.TaskData`) as this run was trained on
        them: its task, context and data seed."""
        from .data import TaskData
        return TaskData.build(self.task, self.cfg.n_ctx, self.config.get("data_seed", 0))

    def weights(self, step: int | None = None) -> dict[str, np.ndarray]:
        return read_checkpoint(checkpoint_path(self.path, self.resolve_step(step)))[0]

    def model(self, step: int | None = None) -> Transformer:
        return Transformer(self.cfg, self.weights(step))

    @property
    def metrics(self) -> list[dict]:
        if self._metrics is None:
            self._metrics = read_metrics(self.path)
        return self._metrics


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of metrics.jsonl up to the first that is not a row (a line cut short by a
    kill, or anything else): everything before it stands."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                break
            if not (isinstance(row, dict) and type(row.get("step")) is int
                    and all(isinstance(row.get(k), (int, float)) for k in METRICS)):
                break
            rows.append(row)
    return rows


def load_run(path) -> Run:
    """The run in folder `path`, with a one-line error when it is not one."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        seeds = sorted(path.glob("seed_*/config.json")) if path.is_dir() else []
        hint = f" (it holds seed runs: try {seeds[0].parent})" if seeds else ""
        raise FlatformerError(f"{path} is not a flatformer run: no config.json{hint}")
    text = read_text(config_file, "run config", MAX_CONFIG_BYTES)
    try:
        config = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise FlatformerError(f"{config_file} is not a valid run config: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        raise FlatformerError(f"{config_file} is not a valid run config: it names no task")
    try:
        cfg = ModelConfig.from_dict(config.get("model"))
    except FlatformerError as exc:
        raise FlatformerError(f"{config_file}: {exc}") from None
    vocab = config.get("vocab")
    if (not isinstance(vocab, list) or len(vocab) != cfg.d_vocab
            or not all(isinstance(w, str) for w in vocab) or len(set(vocab)) != len(vocab)):
        raise FlatformerError(f"{config_file}: vocab must be {cfg.d_vocab} distinct strings "
                              f"(the model's d_vocab)")
    whole(f"{config_file}: data_seed", config.get("data_seed", 0), 0, MAX_SEED)
    return Run(path, config, cfg)


def seed_runs(path) -> list[Run]:
    """The seed runs of a --seeds folder (or the single run itself)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return [load_run(path)]
    dirs = sorted(path.glob("seed_*"), key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0)
    if not dirs:
        raise FlatformerError(f"{path} holds no run and no seed_* runs")
    return [load_run(d) for d in dirs]
