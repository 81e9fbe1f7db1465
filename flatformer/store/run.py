"""A run folder as a whole: its config.json (read here, and written here only), claiming a
folder for a new run or an import, and which checkpoint a --resume continues from."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .checkpoints import check_optim, read_checkpoint
from ..errors import FlatformerError
from .layout import CHECKPOINTS, CONFIG, METRICS, checkpoint_path, checkpoint_steps
from .read import parse_json, read_text
from .write import atomic_write, claim_folder, make_folder, refuse_links, remove_temporaries

MAX_CONFIG_BYTES = 16_000_000  # a corpus run's config holds its text (at most 2 MB of it)


def read_config(folder) -> dict:
    """RUN/config.json as an object naming its task, or one line naming what is wrong."""
    config_file = Path(folder) / CONFIG
    refuse_links(Path(folder))
    text = read_text(config_file, "run config", MAX_CONFIG_BYTES)
    try:
        config = parse_json(text, "it")
    except FlatformerError as exc:
        raise FlatformerError(f"{config_file} is not a valid run config: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        raise FlatformerError(f"{config_file} is not a valid run config: it names no task")
    return config


def write_config(folder, config: dict):
    """The one writer of config.json."""
    atomic_write(Path(folder) / CONFIG, (json.dumps(config, indent=2) + "\n").encode())


def has_run(folder) -> bool:
    return os.path.lexists(Path(folder) / CONFIG)


def holds_config(folder, config: dict) -> bool:
    """Whether the folder's config.json is exactly `config` (unreadable: it is not)."""
    try:
        have = parse_json(read_text(Path(folder) / CONFIG, "run config", MAX_CONFIG_BYTES), "")
    except FlatformerError:
        return False
    return have == config


def start_run(folder, config: dict, resume: bool):
    """Make `folder` this run's (claimed, its lock held by the caller): a folder holding a
    different run is refused, and one holding this run unless `resume`; what killed writes
    left is cleared, then the config is written."""
    out = Path(folder)
    if (out / CONFIG).exists():
        if not holds_config(out, config):
            raise FlatformerError(f"{out} holds a different run; choose another --out or delete it")
        if not resume and (checkpoint_steps(out) or (out / METRICS).exists()):
            raise FlatformerError(
                f"{out} already holds this run; pass --resume to continue "
                f"it or choose another --out"
            )
    make_folder(out / CHECKPOINTS, "--out")
    for part in (out, out / CHECKPOINTS):
        remove_temporaries(part)
    write_config(out, config)


def claim_import(folder) -> Path:
    """An import's --out: claimed as `train` claims its folder, and holding no run yet (an
    import never replaces a checkpoint, someone else's or ours)."""
    out = claim_folder(folder, "--out")
    if has_run(out):
        raise FlatformerError(f"{out} already holds a run; choose another --out")
    return out


def resume_step(folders: list, recipe, n_params: int) -> int | None:
    """The last step every folder has a checkpoint for that can be resumed from (its optimizer
    state whole, its counters in range, its candidate one the recipe has), or None."""
    common = None
    for out in folders:
        steps = set(checkpoint_steps(out, recipe.steps))
        common = steps if common is None else common & steps
    for step in sorted(common or (), reverse=True):
        try:
            for out in folders:
                path = checkpoint_path(out, step)
                optim = read_checkpoint(path)[1]
                check_optim(path, optim, n_params)
                if not 0 <= optim["candidate"][0] < recipe.candidates:
                    raise FlatformerError(f"checkpoint {path} names an unknown candidate")
                if not (
                    0 <= optim["t"][0] <= recipe.steps and 0 <= optim["loss_n"][0] <= recipe.steps
                ):
                    raise FlatformerError(f"checkpoint {path}: optimizer counters out of range")
            return step
        except FlatformerError:
            continue
    return None
