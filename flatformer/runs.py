"""Run folders on disk: config.json, metrics.jsonl and checkpoints/step_XXXXXX.safetensors.

Every write is atomic (write a temporary file, then rename), so a killed process never leaves a
half-written file behind. Checkpoints are safetensors: loading one never executes code.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from .config import ModelConfig
from .errors import FlatformerError
from .transformer import Transformer

CHECKPOINT = re.compile(r"^step_(\d{6,})\.safetensors$")


def atomic_write(path: Path, data: bytes):
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}.safetensors"


def save_checkpoint(run_dir: Path, step: int, tensors: dict[str, np.ndarray],
                    optim: dict[str, np.ndarray] | None = None):
    """Weights under their TransformerLens names, plus the optimizer moments for --resume."""
    data = {name: np.ascontiguousarray(t) for name, t in tensors.items()}
    for name, t in (optim or {}).items():
        data["optim." + name] = np.ascontiguousarray(t)
    atomic_write(checkpoint_path(run_dir, step),
                 st_save(data, metadata={"format": "flatformer-1"}))


def read_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(weights, optimizer state) from a checkpoint file, with one-line errors for bad files."""
    path = Path(path)
    if not path.is_file():
        raise FlatformerError(f"checkpoint {path} does not exist")
    try:
        data = st_load(path.read_bytes())
    except (SafetensorError, ValueError, OSError) as exc:
        raise FlatformerError(f"checkpoint {path} is not a readable safetensors file "
                              f"(truncated or corrupt?): {str(exc).splitlines()[0]}") from None
    weights = {k: v for k, v in data.items() if not k.startswith("optim.")}
    optim = {k[6:]: v for k, v in data.items() if k.startswith("optim.")}
    for name, t in weights.items():
        if t.dtype != np.float64 or not np.all(np.isfinite(t)):
            raise FlatformerError(f"checkpoint {path}: tensor {name} is not finite float64")
    return weights, optim


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
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a kill: everything before it stands
    return rows


def load_run(path) -> Run:
    """The run in folder `path`, with a one-line error when it is not one."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        seeds = sorted(path.glob("seed_*/config.json")) if path.is_dir() else []
        hint = f" (it holds seed runs: try {seeds[0].parent})" if seeds else ""
        raise FlatformerError(f"{path} is not a flatformer run: no config.json{hint}")
    try:
        config = json.loads(config_file.read_text())
        cfg = ModelConfig.from_dict(config["model"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise FlatformerError(f"{config_file} is not a valid run config: {exc}") from None
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
