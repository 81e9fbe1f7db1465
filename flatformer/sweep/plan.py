"""The sweep file and its jobs: read the TOML, check its axes and expand their product into
jobs (plain dicts that travel to worker processes and Ray tasks), each built once to check it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..errors import FlatformerError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

AXES = {"tasks", "presets", "recipes", "seeds", "set", "sets"}


def _names(sweep: dict, key: str, default: list) -> list:
    value = sweep.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise FlatformerError(f"{key} must be a non-empty list of names, got {value!r}")
    return value


def _overrides(table, where: str) -> dict:
    """A table of overrides, as `JobSpec.overrides` takes them (sorted by key)."""
    if not isinstance(table, dict):
        raise FlatformerError(
            f"{where} must be a table of overrides like {{lr = 0.003}}, got {table!r}"
        )
    return dict(sorted(table.items()))


def _pairs(overrides: dict) -> list[str]:
    """Overrides as `--set` would spell them: `key=value`, values in JSON."""
    return [f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(overrides.items())]


MAX_SWEEP_BYTES = 1_000_000
MAX_JOBS = 10_000  # jobs in one sweep (each a process and a folder); counted before expansion


def load_sweep(path, axes: set = AXES) -> dict:
    """The sweep file's contents, with a one-line error for bad TOML or keys not in `axes`."""
    path = Path(path)
    from ..store.read import read_text

    text = read_text(path, "sweep file", MAX_SWEEP_BYTES)
    try:
        sweep = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise FlatformerError(f"{path} is not valid TOML: {exc}") from None
    unknown = sorted(set(sweep) - axes)
    if unknown:
        raise FlatformerError(
            f"{path}: unknown key {unknown[0]!r}; a sweep file takes {', '.join(sorted(axes))}"
        )
    if "tasks" not in sweep or "recipes" not in sweep or "seeds" not in sweep:
        raise FlatformerError(f"{path}: a sweep needs tasks, recipes and seeds")
    return sweep


def expand(sweep: dict, out_dir) -> list[dict]:
    """Every job of the sweep, in the order of its axes: plain dicts (they travel to worker
    processes and Ray tasks, and into done.json). Each is checked by building its Job."""
    from ..training.jobs import parse_seeds
    from ..tasks import get_task

    try:
        seeds = parse_seeds(str(sweep["seeds"]))
    except FlatformerError as exc:
        raise FlatformerError(f'seeds must be a range like "0-63" ({exc})') from None
    common = _overrides(sweep.get("set", {}), "set")
    groups = sweep.get("sets", [{}])
    if not isinstance(groups, list) or not groups:
        raise FlatformerError(
            "sets must be a non-empty list of override tables, e.g. [{}, {lr = 0.003}]"
        )
    sizes = [
        len(sweep[k]) if isinstance(sweep.get(k), list) else 1
        for k in ("tasks", "presets", "recipes", "sets")
    ]
    if math.prod(sizes) > MAX_JOBS:
        raise FlatformerError(
            f"the sweep asks for {math.prod(sizes):,} jobs "
            f"({' x '.join(map(str, sizes))} tasks x presets x recipes x sets); "
            f"at most {MAX_JOBS:,} in one sweep"
        )
    variants = [_overrides(g, "each entry of sets") for g in groups]
    out_dir = Path(out_dir).absolute()
    jobs, names = [], set()
    for task in _names(sweep, "tasks", []):
        presets = _names(sweep, "presets", [get_task(task).default_preset])
        for preset in presets:
            for recipe in _names(sweep, "recipes", []):
                for variant in variants:
                    # A variant's keys override the common ones; both are recorded in the job.
                    overrides = dict(sorted({**common, **variant}.items()))
                    name = ".".join([task, preset, recipe] + ([_label(variant)] if variant else []))
                    if name in names:
                        raise FlatformerError(
                            f"job {name} is repeated: the entries of sets must differ"
                        )
                    if "/" in name:
                        raise FlatformerError(
                            f"job name {name!r} has a '/': choose values without one"
                        )
                    names.add(name)
                    job = {
                        "name": name,
                        "task": task,
                        "preset": preset,
                        "recipe": recipe,
                        "overrides": overrides,
                        "seeds": [seeds[0], seeds[-1]],
                        "folder": str(out_dir / name),
                        "sweep_dir": str(out_dir),
                    }
                    try:
                        built, _ = _build(job)
                    except FlatformerError as exc:
                        raise FlatformerError(f"job {name}: {exc}") from None
                    job["steps"] = built.recipe.steps
                    jobs.append(job)
    return jobs


def _label(overrides: dict) -> str:
    """The folder-name part for overrides: `d_mlp=16,schedule=cosine` (strings unquoted)."""
    return ",".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
        for k, v in sorted(overrides.items())
    )


def spec(job: dict):
    """The `JobSpec` of one sweep job (a plain dict: it travels to workers and Ray tasks)."""
    from ..training.jobs import JobSpec

    first, last = job["seeds"]
    return JobSpec(
        job["task"],
        job["preset"],
        job["recipe"],
        seeds=tuple(range(first, last + 1)),
        out_dir=Path(job["folder"]),
        overrides=job["overrides"],
    )


def _build(job: dict):
    return spec(job).build()


def _identity(job: dict) -> dict:
    """What makes a job this job (its folder may move with the sweep directory)."""
    return {k: job[k] for k in ("name", "task", "preset", "recipe", "overrides", "seeds", "steps")}
