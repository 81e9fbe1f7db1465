"""Learning-dynamics movies: one frame per checkpoint, as MP4 and GIF.

    ck = load_checkpoints(load_run("runs/plus-last-even-seed0"))
    scenes, skipped = prepare(ck, movie_names("mov1,mov4"))
    render(scenes, "runs/plus-last-even-seed0/movies", ["mp4", "gif"])

frames.py loads the checkpoints and each frame's metrics; scene.py holds what every movie
shares; scenes.py lists the paper's five movies (points.py, landscape.py and qk.py compute and
draw them); spectrum.py is modular-addition's movie and induction.py the induction task's;
draw.py holds the frame layout and fast in-place artists; encode.py the streaming writers;
render.py splits the frames across processes.
"""

from __future__ import annotations

from ..errors import FlatformerError
from ..readout import NotApplicable
from .encode import FORMATS
from .frames import Checkpoints, load_checkpoints
from .induction import InductionMovie
from .render import render
from .scene import Geometry
from .scenes import MOVIES
from .spectrum import SpectrumMovie

# Movies of one task (their `task`) kept apart from MOVIES (the suite every run can have): made
# by default for that task's runs only, and skipped for any other run.
TASK_ONLY = (SpectrumMovie, InductionMovie)
TASK_MOVIES = {cls.task: {cls.name: cls} for cls in TASK_ONLY}
ALL_MOVIES = {**MOVIES, **{cls.name: cls for cls in TASK_ONLY}}

__all__ = [
    "MOVIES",
    "TASK_MOVIES",
    "FORMATS",
    "movie_names",
    "formats",
    "prepare",
    "load_checkpoints",
    "render",
    "Checkpoints",
]


def movie_names(spec: str | None, task: str | None = None) -> list[str]:
    """Movie names from a comma list: full names (mov3_qkv), short ones (mov3, qkv) or numbers
    (3); None or "all" for all of them that a run of `task` can have, in order."""
    if spec is None or spec.strip() == "all":
        return list(MOVIES) + list(TASK_MOVIES.get(task, {}))
    names = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        match = [
            n for n in ALL_MOVIES if word in (n, n.split("_", 1)[0], n.split("_", 1)[1], n[3:4])
        ]
        if not match:
            raise FlatformerError(
                f"unknown movie {word!r}; choose from "
                f"{', '.join(ALL_MOVIES)} (or mov1..mov{len(ALL_MOVIES)}, "
                f"or all)"
            )
        if match[0] not in names:
            names.append(match[0])
    if not names:
        raise FlatformerError("--movies is empty; choose from " + ", ".join(MOVIES))
    return names


def formats(spec: str | None) -> list[str]:
    """Formats from a comma list of mp4 and gif (None: both)."""
    if spec is None:
        return list(FORMATS)
    chosen = []
    for word in (w.strip().lower().lstrip(".") for w in spec.split(",") if w.strip()):
        if word not in FORMATS:
            raise FlatformerError(f"unknown format {word!r}; choose from {', '.join(FORMATS)}")
        if word not in chosen:
            chosen.append(word)
    if not chosen:
        raise FlatformerError("--format is empty; choose from " + ", ".join(FORMATS))
    return chosen


def prepare(ck: Checkpoints, names: list[str], head: int = 0):
    """The scenes for `names`, every frame's arrays computed, and {name: reason} for those this
    model cannot have (the landscape needs d_model == 2; the spectrum, modular-addition)."""
    geo = Geometry(ck, head)
    scenes, skipped = [], {}
    for name in names:
        if ALL_MOVIES[name].task not in (None, geo.task.name):
            skipped[name] = f"for {ALL_MOVIES[name].task} runs only"
            continue
        try:
            scenes.append(ALL_MOVIES[name](geo))
        except NotApplicable as exc:
            skipped[name] = str(exc)
    return scenes, skipped
