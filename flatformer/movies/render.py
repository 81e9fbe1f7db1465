"""Render scenes to MP4 and GIF files, frames split across processes.

Every scene's arrays are computed before the worker processes start (all but the landscape's
grid, which each worker computes for its own frames); the workers are forked, so they inherit
those arrays and the loaded checkpoints without copying or serializing them. A
task is one contiguous range of one scene's frames: the worker builds that scene's figure,
renders its frames and streams them to its own MP4 and GIF parts, which are joined in order at
the end. Tasks and results are a few small numbers and paths; progress is a shared array of
per-task frame counters the parent reads.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from ..store.write import make_folder
from .encode import join_gif, join_mp4, open_part

# The scenes of the render in progress, inherited by forked workers (never sent to them).
_SCENES: dict = {}
_COUNTS = None


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous (lo, hi) ranges covering range(n), as equal as possible."""
    parts = max(1, min(parts, n))
    edges = [round(n * j / parts) for j in range(parts + 1)]
    return [(edges[j], edges[j + 1]) for j in range(parts)]


def _render_range(task) -> int:
    slot, name, lo, hi, outputs, fps = task
    scene = _SCENES[name]
    scene.build()
    writers = [open_part(fmt, path, fps) for fmt, path in outputs]
    try:
        for i in range(lo, hi):
            rgba = scene.render(i)
            for w in writers:
                w.append(rgba)
            if _COUNTS is not None:
                _COUNTS[slot] += 1
    finally:
        for w in writers:
            w.close()
        scene.canvas.fig.clear()
        scene.canvas = None
    return hi - lo


def render(
    scenes: list, out_dir: Path, formats: list[str], fps: int = 20, workers: int = 2, progress=None
) -> dict[str, list[Path]]:
    """Write each scene as `out_dir/<name>.<fmt>` for every format; returns the paths.

    This writes exactly those files (and temporary parts next to them). `progress(done)` is
    called with the number of frames rendered so far, about ten times a second.
    """
    global _COUNTS
    out_dir = make_folder(out_dir, "movie folder")
    workers = max(1, workers)
    if "fork" not in mp.get_all_start_methods():
        workers = 1  # the workers inherit the computed scenes by forking (not on Windows)
    tasks, parts = [], {}
    for scene in scenes:
        for j, (lo, hi) in enumerate(split(len(scene), workers)):
            outputs = [(fmt, out_dir / f".{scene.name}.part{j}.{fmt}") for fmt in formats]
            for fmt, path in outputs:
                parts.setdefault((scene.name, fmt), []).append(path)
            tasks.append((len(tasks), scene.name, lo, hi, outputs, fps))
    _SCENES.clear()
    _SCENES.update({s.name: s for s in scenes})
    try:
        if workers == 1:
            _COUNTS = [0] * len(tasks)
            for task in tasks:
                _render_range(task)
                if progress:
                    progress(sum(_COUNTS))
        else:
            _COUNTS = mp.get_context("fork").Array("l", len(tasks), lock=False)
            with mp.get_context("fork").Pool(workers) as pool:
                pending = pool.map_async(_render_range, tasks, chunksize=1)
                while not pending.ready():
                    pending.wait(0.1)
                    if progress:
                        progress(sum(_COUNTS))
                pending.get()
            if progress:
                progress(sum(_COUNTS))
    except BaseException:
        for paths in parts.values():
            for p in paths:
                p.unlink(missing_ok=True)
        raise
    finally:
        _SCENES.clear()
        _COUNTS = None
    written = {}
    for scene in scenes:
        written[scene.name] = []
        for fmt in formats:
            out = out_dir / f"{scene.name}.{fmt}"
            if fmt == "mp4":
                join_mp4(parts[(scene.name, fmt)], out)
            else:
                join_gif(parts[(scene.name, fmt)], out, scene.width, scene.height)
            written[scene.name].append(out)
    return written
