"""Where things lie in a run folder, and the only place their names are made or parsed:

RUN/config.json               the run (store.run writes it)
RUN/metrics.jsonl             one row per evaluation
RUN/checkpoints/step_XXXXXX.safetensors
RUN/.lock                     held while a process writes the run (store.lock)
RUN/figures/step_XXXXXX/      the figures of one checkpoint
DIR/seed_S/                   one run per seed of a --seeds job
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CONFIG = "config.json"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
LOCK = ".lock"
DONE = "done.json"  # a sweep job's mark that it finished
RUN_FILES = (CONFIG, METRICS, CHECKPOINTS, LOCK, DONE)

# ASCII digits only ("\d" takes "٣" too), and a name must be the one its number makes.
CHECKPOINT = re.compile(r"step_([0-9]{6,})\.safetensors")
SEED_FOLDER = re.compile(r"seed_(0|[1-9][0-9]*)")


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}.safetensors"


def checkpoint_path(run_dir, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / checkpoint_name(step)


def step_of(name: str) -> int | None:
    """The step a checkpoint's file name gives (None: not a checkpoint's name)."""
    match = CHECKPOINT.fullmatch(name)
    if match is None or checkpoint_name(int(match.group(1))) != name:
        return None
    return int(match.group(1))


def checkpoint_steps(run_dir, last: int | None = None) -> list[int]:
    """Steps with a checkpoint in the run, ascending; with `last`, none past it (a stray file
    past the run's end is not the run's)."""
    folder = os.path.join(run_dir, CHECKPOINTS)
    if not os.path.isdir(folder):
        return []
    steps = sorted(s for name in os.listdir(folder) if (s := step_of(name)) is not None)
    return steps if last is None else [s for s in steps if s <= last]


def seed_folder(out_dir, seed: int) -> Path:
    return Path(out_dir) / f"seed_{seed}"


def seed_folders(out_dir) -> list[Path]:
    """The seed_S folders of a --seeds folder, by seed."""
    if not os.path.isdir(out_dir):
        return []
    found = [(int(m.group(1)), e) for e in os.listdir(out_dir) if (m := SEED_FOLDER.fullmatch(e))]
    return [Path(out_dir) / name for _, name in sorted(found)]


def figures_folder(run_dir, step: int) -> Path:
    return Path(run_dir) / "figures" / f"step_{step:06d}"
