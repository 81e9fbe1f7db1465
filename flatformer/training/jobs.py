"""From what a user asks for (a JobSpec: a task or a corpus, a preset, a recipe, seeds, --set
overrides, an engine) to the training job (a Job: the task, what the model is, a ModelConfig,
how it trains, a Recipe, and the engine, chosen once) and its run folders: shared by `train`,
`reproduce`, sweeps and the notebook."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..errors import FlatformerError
from ..store.limits import MAX_SEED, MAX_SEEDS, whole
from ..store.layout import seed_folder
from ..store.write import output_folder
from ..errors import did_you_mean

if TYPE_CHECKING:
    from ..config import ModelConfig
    from ..engine.select import Engine
    from .recipes import Recipe
    from ..tasks.base import Task

MAX_STEPS_VARIABLE = "FLATFORMER_MAX_STEPS"


def max_steps() -> int | None:
    """The cap that FLATFORMER_MAX_STEPS puts on every training job's steps (None: unset).
    The README's docs test sets it so that every command there finishes in seconds."""
    value = os.environ.get(MAX_STEPS_VARIABLE, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) < 1:  # "²" is a digit too
        raise FlatformerError(f"{MAX_STEPS_VARIABLE} must be a whole number >= 1, got {value!r}")
    return int(value)


def parse_sets(pairs: list[str]) -> dict:
    """`key=value` pairs; values are read as JSON when they parse (numbers, true, [..])."""
    result = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FlatformerError(f"--set takes key=value, got {pair!r}")
        try:
            result[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            result[key.strip()] = value
    return result


def parse_seeds(seeds: str | None) -> list[int] | None:
    """The seeds of a range like 0-63 (None when no range is given)."""
    if seeds is None:
        return None
    lo, sep, hi = seeds.partition("-")
    try:
        first, last = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise FlatformerError(f"--seeds takes a range like 0-63, got {seeds!r:.40}") from None
    if first < 0 or last < first:
        raise FlatformerError(f"--seeds range {seeds!r} is empty or negative")
    whole("--seeds: the last seed", last, 0, MAX_SEED)
    whole("--seeds: the number of seeds", last - first + 1, 1, MAX_SEEDS)
    return list(range(first, last + 1))


@dataclass
class Job:
    """One training program, built from a JobSpec: the task, what the model is (ModelConfig),
    how it trains (Recipe), the seeds trained together and their folders, and the engine that
    computes it, chosen once, here (engine/select.py's choose: give auto, numba or numpy)."""

    task: Task
    cfg: ModelConfig
    recipe: Recipe
    seeds: list[int]
    out_dirs: list[Path]
    data_seed: int = 0
    config_extra: dict = field(default_factory=dict)
    capped_from: int | None = None  # the steps asked for, when FLATFORMER_MAX_STEPS cut them
    engine: Engine | str = "auto"

    def __post_init__(self):
        from ..engine.select import resolve  # numba's import waits for a job to be made

        self.recipe, self.engine = resolve(self.cfg, self.recipe, self.engine)

    def run_config(self, seed: int) -> dict:
        return {
            "flatformer": __version__,
            "task": self.task.name,
            "seed": seed,
            "data_seed": self.data_seed,
            "vocab": list(self.task.vocab),
            "model": self.cfg.to_dict(),
            "recipe": self.recipe.to_dict(),
            **self.config_extra,
        }


@dataclass(frozen=True)
class JobSpec:
    """What a user asks for, typed: a task name (or a corpus file and its tokenizer), a preset
    and a recipe (None: the task's own), one seed or several trained together, the output folder
    (default: runs/TASK-seedS, or runs/TASK for several seeds), overrides of model or recipe
    fields as values (`{"lr": 0.003, "d_mlp": 16}`) and the engine asked for (--engine).
    `train`, `sweep` and `reproduce` all build their jobs from one; `build()` checks it and
    returns the Job (its engine chosen) and its folder."""

    task: str | None = None
    preset: str | None = None
    recipe: str | None = None
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    out_dir: Path | None = None
    overrides: dict = field(default_factory=dict)
    corpus: Path | None = None
    tokenizer: str | None = None
    engine: str = "auto"  # auto | numba | numpy: the Job chooses its engine from it, once

    def build(self):
        """The training job (a Job) and its output folder."""

        from ..config import PRESETS, ModelConfig, preset
        from ..tasks import get_task
        from ..tasks.corpus import CorpusTask
        from .recipes import Recipe, get_recipe

        if self.corpus is not None and self.task is not None:
            raise FlatformerError("give a task name or --corpus FILE, not both")
        if self.corpus is None and self.tokenizer is not None:
            raise FlatformerError("--tokenizer goes with --corpus FILE")
        if self.corpus is not None:
            task = CorpusTask.from_file(self.corpus, self.tokenizer or "word")
        elif self.task is None:
            raise FlatformerError("give a task name (flatformer tasks lists them) or --corpus FILE")
        else:
            task = get_task(self.task)
        # The task's own settings (a second layer, fewer steps) go under the user's overrides.
        overrides = {**task.defaults, **self.overrides}
        task_settings = {k: overrides.pop(k) for k in list(overrides) if k in task.settings}
        if task_settings:
            task = get_task(task.name, task_settings)
        model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
        recipe_fields = {f.name for f in dataclasses.fields(Recipe)}
        unknown = sorted(set(overrides) - model_fields - recipe_fields - {"data_seed"})
        if unknown:
            task_keys = f"; {task.name} keys: {', '.join(task.settings)}" if task.settings else ""
            near = did_you_mean(
                unknown[0],
                (model_fields - {"d_vocab"}) | recipe_fields | set(task.settings) | {"data_seed"},
            )
            raise FlatformerError(
                f"--set: unknown key {unknown[0]!r}{near}; model keys: "
                f"{', '.join(sorted(model_fields - {'d_vocab'}))}; recipe "
                f"keys: {', '.join(sorted(recipe_fields))}{task_keys}"
            )
        if "d_vocab" in overrides:
            raise FlatformerError("--set: d_vocab comes from the task's vocabulary")
        preset_name = self.preset or task.default_preset
        recipe_name = self.recipe or task.default_recipe
        if preset_name not in PRESETS:
            raise FlatformerError(
                f"unknown preset {preset_name!r}"
                f"{did_you_mean(preset_name, PRESETS)}; choose one of "
                f"{', '.join(PRESETS)}"
            )
        try:
            cfg = preset(
                preset_name,
                len(task.vocab),
                **{k: v for k, v in overrides.items() if k in model_fields},
            )
            recipe = get_recipe(
                recipe_name, **{k: v for k, v in overrides.items() if k in recipe_fields}
            )
            capped_from = None
            cap = max_steps()
            if cap is not None and recipe.steps > cap:
                # A capped run chooses its candidate early, as any short run does (get_recipe).
                capped = {
                    k: v
                    for k, v in overrides.items()
                    if k in recipe_fields and not (k == "select_step" and v > cap)
                }
                capped_from, recipe = (
                    recipe.steps,
                    get_recipe(recipe_name, **{**capped, "steps": cap}),
                )
        except TypeError as exc:
            raise FlatformerError(f"--set: {exc}") from None
        task.check_config(cfg)
        whole("--seed", self.seed, 0, MAX_SEED)
        if self.seeds:
            whole("--seeds: the last seed", max(self.seeds), 0, MAX_SEED)
            whole("--seeds: the number of seeds", len(self.seeds), 1, MAX_SEEDS)
        out_dir = self.out_dir
        if out_dir is None:
            stem = Path(self.corpus).stem if self.corpus is not None else task.name
            out_dir = Path("runs") / (stem if self.seeds else f"{stem}-seed{self.seed}")
        output_folder(out_dir, "--out")
        if self.seeds:
            seed_list = list(self.seeds)
            dirs = [seed_folder(out_dir, s) for s in seed_list]
        else:
            seed_list, dirs = [self.seed], [Path(out_dir)]
        extra = {"preset": preset_name, "recipe_name": recipe_name, **task.config_extra()}
        data_seed = overrides.get("data_seed", 0)
        whole("--set: data_seed", data_seed, 0, MAX_SEED)
        job = Job(task, cfg, recipe, seed_list, dirs, data_seed, extra, capped_from, self.engine)
        return job, out_dir


def build_job(
    task_name, preset_name, recipe_name, seed, seeds, out_dir, sets, corpus=None, tokenizer=None
):
    """`JobSpec(...).build()` from the command line's strings: `seeds` a range like "0-63",
    `sets` a list of "key=value" (kept for scripts, benchmarks and the notebook)."""
    seed_list = parse_seeds(seeds)
    return JobSpec(
        task_name,
        preset_name,
        recipe_name,
        seed,
        tuple(seed_list) if seed_list else None,
        out_dir,
        parse_sets(sets),
        corpus,
        tokenizer,
    ).build()


def capped_note(job) -> str | None:
    """The one line that says a run was shortened by FLATFORMER_MAX_STEPS (None: it was not)."""
    if job.capped_from is None:
        return None
    return (
        f"note: {MAX_STEPS_VARIABLE}={job.recipe.steps} caps this run at "
        f"{job.recipe.steps} steps (asked: {job.capped_from})"
    )
