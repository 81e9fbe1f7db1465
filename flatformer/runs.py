"""Run folders on disk: config.json, metrics.jsonl and checkpoints/step_XXXXXX.safetensors.

Files are written atomically (a temporary file, then rename), so a killed process never leaves a
half-written one behind; the one exception, metrics.jsonl's new rows, is appended, and a line a
kill cut short ends what `read_metrics` reads (a resumed run rewrites the file whole).
Checkpoints are safetensors (their format: checkpoints.py): loading one never executes code.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The checkpoint format's names, kept importable from here (importers, sweeps and tests do).
from .checkpoints import CHECKPOINT as CHECKPOINT
from .checkpoints import MAX_CHECKPOINT_BYTES as MAX_CHECKPOINT_BYTES
from .checkpoints import CheckpointLayout as CheckpointLayout
from .checkpoints import check_optim as check_optim
from .checkpoints import checkpoint_bytes as checkpoint_bytes
from .checkpoints import checkpoint_name as checkpoint_name
from .checkpoints import checkpoint_path as checkpoint_path
from .checkpoints import read_checkpoint as read_checkpoint
from .config import ModelConfig
from .errors import FlatformerError
from .limits import MAX_SEED, parse_json, read_bytes, read_text, whole
from .transformer import Transformer

METRICS = ("train_loss", "val_loss", "rule_error")  # with "step", in every metrics row
MAX_METRICS_BYTES = 2**30  # 10 million rows of ~100 bytes: MAX_STEPS evaluated every step
MAX_CONFIG_BYTES = 16_000_000  # a corpus run's config holds its text (at most 2 MB of it)


class WriteFailed(FlatformerError):
    pass


# Created, never opened if they exist, never through a link: a name planted in the folder (a
# symlink to a file elsewhere) makes the write fail instead of writing through it.
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
APPEND = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)


def atomic_write(path: str | Path, data: bytes):
    """Write a temporary file, then rename it over `path`: a kill or a failed write (a full
    disk) leaves the previous version whole. The temporary name carries a random suffix and
    is created exclusively without following links, so nobody can plant it; the rename
    replaces `path` itself, never what a link there points to. Not fsync'ed: that survives
    any crash of the process, not a power cut, and would cost more than the whole default
    run's training (its 300 writes). Plain strings, not pathlib, inside: a 64-seed run writes 13,000 files."""
    path = os.fspath(path)
    tmp = f"{path}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "wb", opener=lambda name, _: os.open(name, CREATE, 0o644)) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise WriteFailed(
            f"could not write {path} ({exc.strerror or exc}); the version before it is intact"
        ) from None


# The name `atomic_write` gives its temporary file: a kill between its open and its rename
# leaves one behind, which `remove_temporaries` clears before a run is written again.
TEMPORARY = re.compile(r"^.+\.[0-9a-f]{12}\.tmp$")


def remove_temporaries(folder: str | Path):
    """Delete what killed writes left in `folder` (our own temporary names only, never a link's
    target), so a resumed run's folder holds exactly what an unbroken one does. Called with the
    folder's lock held: no other writer's temporary file can be in flight."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            if TEMPORARY.match(entry.name) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def append_write(path: str | Path, data: bytes):
    """Append to `path` (never through a link); a failed write (a full disk) cuts the file
    back to what it held, so it never ends in half a line. Opened for each append: a run may
    write to thousands of seeds' files, more than a process may hold open (256 on macOS)."""
    path = os.fspath(path)
    try:
        with open(
            path, "ab", opener=lambda name, _: os.open(name, APPEND | os.O_CREAT, 0o644)
        ) as f:
            size = f.tell()
            try:
                f.write(data)
                f.flush()
            except OSError:
                f.truncate(size)
                raise
    except OSError as exc:
        raise WriteFailed(
            f"could not write {path} ({exc.strerror or exc}); the version before it is intact"
        ) from None


RUN_FILES = ("config.json", "metrics.jsonl", "checkpoints", ".lock", "done.json")


def refuse_links(folder: Path, names=RUN_FILES):
    """Refuse a run folder, or a part of it we read or write, that is a symbolic link: a
    folder handed over could point checkpoints/ (or the lock) at files elsewhere."""
    folder = Path(folder)
    if folder.is_symlink():
        raise FlatformerError(
            f"{folder} is a symbolic link; give the folder it points to "
            f"({os.path.realpath(folder)})"
        )
    for name in names:
        if (folder / name).is_symlink():
            raise FlatformerError(
                f"{folder / name} is a symbolic link: a run folder's files "
                f"are its own; remove the link"
            )


def left_by_a_start(entry: os.DirEntry) -> bool:
    """What a run killed before its config.json was written leaves in its folder: the lock,
    an empty checkpoints/ and the temporary file of an atomic write (so its rerun goes on)."""
    if entry.is_symlink():
        return False
    if entry.name == "checkpoints" and entry.is_dir():
        return not any(os.scandir(entry.path))
    return entry.name == ".lock" or (bool(TEMPORARY.match(entry.name)) and entry.is_file())


def claim_folder(folder, what: str, ours=lambda f: (Path(f) / "config.json").is_file()):
    """Refuse, before anything is written, an output folder that is not ours to write: the
    filesystem's root, a file, a symbolic link, or an existing non-empty folder that holds
    no run (someone else's files). A folder holding a run is for the caller to judge."""
    folder = Path(folder)
    if folder.exists() and os.path.realpath(folder) == os.path.realpath(os.sep):
        raise FlatformerError(
            f"{what} {folder} is the filesystem's root; give a folder of its own, e.g. runs/mine"
        )
    if folder.exists() and not folder.is_dir():
        raise FlatformerError(f"{what} {folder} is a file, not a folder")
    refuse_links(folder)
    if folder.is_dir() and not ours(folder) and not all(map(left_by_a_start, os.scandir(folder))):
        raise FlatformerError(
            f"{what} {folder} is not empty and holds no flatformer run; "
            f"choose an empty or new folder"
        )
    return folder


# What the drawing commands write (figures, movies and their posters, comparisons): a folder of
# only these is ours to write again, whichever of them wrote it (figures and movies may share one).
OUTPUT_SUFFIXES = (".png", ".pdf", ".svg", ".mp4", ".gif", ".json")


def holds_only(*suffixes: str):
    """`claim_folder`'s test of ours for a folder of outputs (figures, movies, a comparison):
    every entry a regular file (not a link) ending in one of `suffixes`, so a rerun replaces
    its own files and never writes among someone else's."""

    def ours(folder) -> bool:
        return all(
            e.is_file(follow_symlinks=False) and e.name.endswith(suffixes)
            for e in os.scandir(folder)
        )

    return ours


@dataclass
class Run:
    """A trained run folder: its config, metrics and checkpoints.

    >>> run = load_run("runs/plus-last-even-seed0")          # doctest: +SKIP
    >>> last = run.metrics[-1]                                # doctest: +SKIP
    >>> last.get("rule_error"), run.model().cfg.d_model       # doctest: +SKIP
    (0.0, 2)
    """

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
        steps = sorted(int(m.group(1)) for f in os.listdir(folder) if (m := CHECKPOINT.match(f)))
        last = (self.config.get("recipe") or {}).get("steps")
        if isinstance(last, int) and not isinstance(last, bool):
            return [s for s in steps if s <= last]  # a stray file past the run's end is not it
        return steps

    def resolve_step(self, step: int | None) -> int:
        steps = self.steps
        if not steps:
            raise FlatformerError(f"run {self.path} has no checkpoints")
        if step is None:
            return steps[-1]
        if step not in steps:
            near = min(steps, key=lambda s: abs(s - step))
            raise FlatformerError(
                f"run {self.path} has no checkpoint at step {step} "
                f"(nearest: {near}; range {steps[0]}..{steps[-1]})"
            )
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
    if not os.path.lexists(path):
        return []
    refuse_links(Path(run_dir), ["metrics.jsonl"])
    rows = []
    for line in read_bytes(path, "metrics", MAX_METRICS_BYTES).splitlines():
        try:
            row = parse_json(line.decode("utf-8"), "row", allow_nan=True)  # a diverged run's
        except (FlatformerError, UnicodeDecodeError):
            break
        if not (
            isinstance(row, dict)
            and type(row.get("step")) is int
            and all(isinstance(row.get(k), (int, float)) for k in METRICS)
        ):
            break
        rows.append(row)
    return rows


def load_run(path) -> Run:
    """The run in folder `path`, with a one-line error when it is not one.

    >>> model = load_run("runs/plus-last-even-seed0").model()   # doctest: +SKIP
    >>> logits, cache = model.run_with_cache([[4, 1, 11, 4]])   # doctest: +SKIP
    """
    path = Path(path)
    config_file = path / "config.json"
    if not os.path.lexists(config_file):  # a link or a FIFO there is refused below, by name
        seeds = sorted(path.glob("seed_*/config.json")) if path.is_dir() else []
        hint = f" (it holds seed runs: try {seeds[0].parent})" if seeds else ""
        inside = [p for p in (path.parent, path.parent.parent) if (p / "config.json").is_file()]
        if inside:  # a checkpoint file or the checkpoints folder, passed for its run
            step = (
                f" (--step {int(path.stem[5:])} picks this checkpoint)"
                if path.stem.startswith("step_") and path.stem[5:].isdigit()
                else ""
            )
            hint = f": pass its run folder, {inside[0]}{step}"
        raise FlatformerError(f"{path} is not a flatformer run: no config.json{hint}")
    refuse_links(path)
    text = read_text(config_file, "run config", MAX_CONFIG_BYTES)
    try:
        config = parse_json(text, "it")
    except FlatformerError as exc:
        raise FlatformerError(f"{config_file} is not a valid run config: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        raise FlatformerError(f"{config_file} is not a valid run config: it names no task")
    try:
        cfg = ModelConfig.from_dict(config.get("model"))
    except FlatformerError as exc:
        raise FlatformerError(f"{config_file}: {exc}") from None
    vocab = config.get("vocab")
    if (
        not isinstance(vocab, list)
        or len(vocab) != cfg.d_vocab
        or not all(isinstance(w, str) for w in vocab)
        or len(set(vocab)) != len(vocab)
    ):
        raise FlatformerError(
            f"{config_file}: vocab must be {cfg.d_vocab} distinct strings (the model's d_vocab)"
        )
    whole(f"{config_file}: data_seed", config.get("data_seed", 0), 0, MAX_SEED)
    check_task(config_file, config, cfg)
    return Run(path, config, cfg)


def check_task(config_file: Path, config: dict, cfg: ModelConfig):
    """The config against its task: the task (with its settings) must exist and make exactly
    the config's vocabulary, so every token id the task produces is a row of W_E (a tampered
    task would send the compiled kernels reading past the end of a weight matrix)."""
    from .tasks import task_for_run

    try:
        task = task_for_run(config)
    except FlatformerError as exc:
        raise FlatformerError(f"{config_file}: {str(exc).splitlines()[0]}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise FlatformerError(
            f"{config_file}: its task settings are not valid "
            f"({type(exc).__name__}: {str(exc)[:160]})"
        ) from None
    if list(task.vocab) != config["vocab"]:
        raise FlatformerError(
            f"{config_file}: task {config['task']} makes a vocabulary of "
            f"{len(task.vocab)} tokens, not the config's {cfg.d_vocab} "
            f"(task or task settings changed after training)"
        )


def seed_runs(path) -> list[Run]:
    """The seed runs of a --seeds folder (or the single run itself).

    >>> [run.config["seed"] for run in seed_runs("runs/many")]   # doctest: +SKIP
    [0, 1, 2, 3]
    """
    path = Path(path)
    if (path / "config.json").is_file():
        return [load_run(path)]
    dirs = sorted(path.glob("seed_*"), key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0)
    if not dirs:
        raise FlatformerError(f"{path} holds no run and no seed_* runs")
    return [load_run(d) for d in dirs]
