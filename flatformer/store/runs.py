"""A trained run as Python sees it (`Run`, `load_run`, `seed_runs`, `read_metrics`), read
through the store, which owns the folder's layout and files (store/). A line of
metrics.jsonl a kill cut short ends what `read_metrics` reads (a resumed run rewrites the file
whole). Checkpoints are safetensors (their format: checkpoints.py): loading one never executes
code."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checkpoints import read_checkpoint
from ..config import ModelConfig
from ..errors import FlatformerError
from .limits import MAX_SEED, whole
from .layout import CONFIG, METRICS as METRICS_FILE
from .layout import checkpoint_path, checkpoint_steps, seed_folders, step_of
from .read import parse_json, read_bytes
from .run import read_config
from .write import refuse_links
from ..model.transformer import Transformer

METRICS = ("train_loss", "val_loss", "rule_error")  # with "step", in every metrics row
MAX_METRICS_BYTES = 2**30  # 10 million rows of ~100 bytes: MAX_STEPS evaluated every step


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
        from ..tasks import task_for_run

        return task_for_run(self.config)

    @property
    def vocab(self) -> list[str]:
        return self.config["vocab"]

    @property
    def vocab_out(self) -> list[str]:
        """The names of the logits' classes: a compiled program's output values, else the
        first `vocab_out` tokens' names (a model whose outputs are its inputs, or the first
        of them, as TransformerLens's d_vocab_out reads)."""
        classes = ((self.config.get("imported") or {}).get("rasp") or {}).get("classes")
        if isinstance(classes, list) and len(classes) == self.cfg.vocab_out:
            return [str(c) for c in classes]
        return self.vocab[: self.cfg.vocab_out]

    @property
    def steps(self) -> list[int]:
        """Steps with a checkpoint on disk, ascending."""
        last = (self.config.get("recipe") or {}).get("steps")
        if not isinstance(last, int) or isinstance(last, bool):
            last = None  # an imported run has no recipe
        return checkpoint_steps(self.path, last)

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
        from ..tasks.windows import TaskData

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
    path = Path(run_dir) / METRICS_FILE
    if not os.path.lexists(path):
        return []
    refuse_links(Path(run_dir), [METRICS_FILE])
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
    config_file = path / CONFIG
    if not os.path.lexists(config_file):  # a link or a FIFO there is refused below, by name
        seeds = [d for d in seed_folders(path) if (d / CONFIG).is_file()]
        hint = f" (it holds seed runs: try {seeds[0]})" if seeds else ""
        inside = [p for p in (path.parent, path.parent.parent) if (p / CONFIG).is_file()]
        if inside:  # a checkpoint file or the checkpoints folder, passed for its run
            step = step_of(path.name)
            picks = "" if step is None else f" (--step {step} picks this checkpoint)"
            hint = f": pass its run folder, {inside[0]}{picks}"
        raise FlatformerError(f"{path} is not a flatformer run: no config.json{hint}")
    config = read_config(path)
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
    from ..tasks import task_for_run

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
    if (path / CONFIG).is_file():
        return [load_run(path)]
    dirs = seed_folders(path)
    if not dirs:
        raise FlatformerError(f"{path} holds no run and no seed_* runs")
    return [load_run(d) for d in dirs]
