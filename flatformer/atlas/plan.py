"""The atlas file: a sweep file (tasks, presets, recipes, seeds, `sets`, `[set]`) with an
optional `[draw]` table of random configurations, as Zhong et al. 2023 drew theirs
(fjzzq2002/pizza, `code/train-main.py`: a loop drawing `attn_coeff = uniform(0, 1)` and, in the
varying-width grid, `d_model = int(2 ** uniform(5, 9))` for each run).

    [draw]
    n_runs = 200                          # configurations drawn
    seed = 0                              # the draws' seed: the same file draws the same runs
    attn_coeff = {uniform = [0, 1]}
    d_model = {loguniform = [32, 512], integer = true}
    d_mlp = {times = ["d_model", 4]}      # derived from a drawn key
    n_layers = {integers = [1, 4]}        # whole numbers, both ends included
    act_fn = {choice = ["relu", "gelu"]}

Draw i is made from its own generator, seeded by (seed, i): it does not change when n_runs
grows, so an atlas can be extended and a finished run is never redrawn. Each draw is one more
override group (as an entry of `sets`), its job named `draw-0007`; each job trains the seed
range batched, as a sweep's job does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import FlatformerError
from ..sweep.plan import AXES, MAX_JOBS, _label, expand, load_sweep

ATLAS_AXES = AXES | {"draw"}
DISTRIBUTIONS = ("uniform", "loguniform", "integers", "choice", "times")


def load_atlas(path, sets: dict | None = None) -> dict:
    """The atlas file's contents (a sweep file with an optional [draw] table), with the command
    line's --set pairs added to its [set]."""
    atlas = load_sweep(path, ATLAS_AXES)
    if sets:
        atlas["set"] = {**atlas.get("set", {}), **sets}
    if "draw" in atlas and not isinstance(atlas["draw"], dict):
        raise FlatformerError(f"{path}: draw must be a table, e.g. [draw] n_runs = 200")
    return atlas


def _whole(value, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FlatformerError(f"[draw] {what} must be a whole number in {lo}..{hi}, got {value!r}")
    return value


def _pair(spec: dict, name: str, key: str) -> tuple[float, float]:
    value = spec[name]
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or not all(math.isfinite(v) for v in value)
        or value[0] > value[1]
    ):
        raise FlatformerError(f"[draw] {key}: {name} takes [low, high], got {value!r}")
    return value[0], value[1]


def _check(key: str, spec) -> dict:
    """One [draw] entry, checked: a table naming one distribution (and `integer` optionally)."""
    if not isinstance(spec, dict):
        raise FlatformerError(
            f"[draw] {key} must be a distribution like {{uniform = [0, 1]}}, got {spec!r}"
        )
    names = [name for name in spec if name in DISTRIBUTIONS]
    unknown = sorted(set(spec) - set(DISTRIBUTIONS) - {"integer"})
    if unknown or len(names) != 1:
        raise FlatformerError(
            f"[draw] {key} takes one of {', '.join(DISTRIBUTIONS)} "
            f"(and integer = true), got {spec!r}"
        )
    name = names[0]
    if name != "choice":
        if name == "times":
            value = spec["times"]
            if (
                not isinstance(value, list)
                or len(value) != 2
                or not isinstance(value[0], str)
                or isinstance(value[1], bool)
                or not isinstance(value[1], (int, float))
            ):
                raise FlatformerError(
                    f'[draw] {key}: times takes ["other key", factor], got {value!r}'
                )
        else:
            low, high = _pair(spec, name, key)
            if name == "loguniform" and low <= 0:
                raise FlatformerError(f"[draw] {key}: loguniform needs low > 0, got {low!r}")
    elif not isinstance(spec["choice"], list) or not spec["choice"]:
        raise FlatformerError(f"[draw] {key}: choice takes a non-empty list of values")
    if not isinstance(spec.get("integer", False), bool):
        raise FlatformerError(f"[draw] {key}: integer is true or false")
    return spec


def draw_table(draw: dict) -> tuple[int, int, dict]:
    """(n_runs, seed, {key: distribution}) of a [draw] table, checked."""
    n_runs = _whole(draw.get("n_runs"), "n_runs", 1, MAX_JOBS)
    seed = _whole(draw.get("seed", 0), "seed", 0, 2**32 - 1)
    knobs = {k: _check(k, v) for k, v in draw.items() if k not in ("n_runs", "seed")}
    if not knobs:
        raise FlatformerError("[draw] names no key to draw, e.g. attn_coeff = {uniform = [0, 1]}")
    for key, spec in knobs.items():
        if "times" in spec and spec["times"][0] not in knobs:
            raise FlatformerError(f"[draw] {key}: times reads {spec['times'][0]!r}, not drawn")
        if "times" in spec and "times" in knobs[spec["times"][0]]:
            raise FlatformerError(f"[draw] {key}: times reads a key that is itself derived")
    return n_runs, seed, knobs


def draw_one(knobs: dict, seed: int, index: int) -> dict:
    """Draw `index`'s overrides: from its own generator seeded by (seed, index), the keys in
    sorted order, so the same file always gives the same draw."""
    rng = np.random.default_rng([seed, index])
    values = {}
    for key in sorted(knobs):
        spec = knobs[key]
        if "uniform" in spec:
            value = float(rng.uniform(*spec["uniform"]))
        elif "loguniform" in spec:
            low, high = spec["loguniform"]
            value = float(math.exp(rng.uniform(math.log(low), math.log(high))))
        elif "integers" in spec:
            low, high = spec["integers"]
            value = int(rng.integers(math.ceil(low), math.floor(high) + 1))
        elif "choice" in spec:
            value = spec["choice"][int(rng.integers(len(spec["choice"])))]
        else:
            continue
        values[key] = int(math.floor(value)) if spec.get("integer") else value
    for key in sorted(knobs):
        spec = knobs[key]
        if "times" in spec:
            other, factor = spec["times"]
            value = values[other] * factor
            values[key] = int(round(value)) if spec.get("integer", True) else value
    return dict(sorted(values.items()))


def draws(atlas: dict) -> list[dict]:
    """Every draw's overrides (none: an atlas without [draw] is its sweep's grid)."""
    if "draw" not in atlas:
        return []
    n_runs, seed, knobs = draw_table(atlas["draw"])
    return [draw_one(knobs, seed, i) for i in range(n_runs)]


def expand_atlas(atlas: dict, out_dir) -> list[dict]:
    """Every job of the atlas: the sweep's jobs, with each entry of `sets` crossed with each
    draw. A drawn job is named after its draw (`...draw-0007`); `job["draw"]` holds the draw's
    index and `job["drawn"]` its values (they are in its overrides too)."""
    drawn = draws(atlas)
    groups = atlas.get("sets", [{}])
    if not isinstance(groups, list) or not groups:
        raise FlatformerError(
            "sets must be a non-empty list of override tables, e.g. [{}, {lr = 0.003}]"
        )
    if not drawn:
        jobs = expand(atlas, out_dir)
        for job in jobs:
            job["draw"], job["drawn"] = None, {}
        return jobs
    if len(groups) * len(drawn) > MAX_JOBS:
        raise FlatformerError(
            f"the atlas asks for {len(groups) * len(drawn):,} jobs per task, preset and recipe; "
            f"at most {MAX_JOBS:,}"
        )
    for group in groups:
        if isinstance(group, dict) and set(group) & set(atlas["draw"]):
            raise FlatformerError(
                f"{sorted(set(group) & set(atlas['draw']))[0]} is both drawn and set in sets"
            )
    variants = [(g, i) for g in groups for i in range(len(drawn))]
    sweep = {k: v for k, v in atlas.items() if k != "draw"}
    sweep["sets"] = [{**g, **drawn[i]} if isinstance(g, dict) else g for g, i in variants]
    jobs = expand(sweep, out_dir)
    # expand's order: task, preset, recipe, then the variants (innermost).
    for j, job in enumerate(jobs):
        group, index = variants[j % len(variants)]
        base = ".".join([job["task"], job["preset"], job["recipe"]])
        name = ".".join([base] + ([_label(group)] if group else []) + [f"draw-{index:04d}"])
        job["folder"] = str(Path(job["sweep_dir"]) / name)
        job["name"], job["draw"], job["drawn"] = name, index, drawn[index]
    return jobs
