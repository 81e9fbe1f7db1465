"""The stages of the main job as library functions: train a job, draw the figure suite, write
the movies, the explorer and the analysis. Each takes a progress callback and prints nothing;
the commands (`commands/`) and `reproduce.py` are thin callers that show the progress.

A callback is `progress(stage, i, n, message)`: stage is "train", "figures", "movies",
"explorer" or "analysis", i of n units done (n = 0 while the total is not known yet), and a
short message saying what is happening (a loss, a figure's name). Stage "note" carries a line
to keep rather than a state of progress (a run capped by FLATFORMER_MAX_STEPS says so).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Callable

from ..errors import FlatformerError
from ..store.limits import processes

Progress = Callable[[str, int, int, str], None]


def quiet(stage: str, i: int, n: int, message: str):
    """The callback that shows nothing."""


# --------------------------------------------------------------------------- train


def train_info(trainer) -> str:
    """The latest held-out numbers of a trainer: one seed's, or the median over many."""
    rows = [m[-1] for m in trainer.metrics if m]
    if not rows:
        return ""
    losses = sorted(r["val_loss"] for r in rows)
    errors = sorted(r["rule_error"] for r in rows)
    if len(rows) == 1:
        return f"loss {losses[0]:.3f}, rule error {errors[0]:.1%}"
    return f"median loss {losses[len(losses) // 2]:.3f}, rule error {errors[len(errors) // 2]:.1%}"


def compile_notice() -> str:
    from ..engine.kernels import compile_estimate

    return f"compiling the engine, once ({compile_estimate()}; later runs start warm)..."


def train_job(job, resume: bool = False, progress: Progress = quiet):
    """Train `job` (a `train.Job`), reporting every 100 steps; returns the Trainer."""
    from ..training.jobs import capped_note
    from ..training.trainer import train

    total, note = job.recipe.steps, capped_note(job)
    started = []

    def report(trainer):
        if started and trainer.step % 100 and trainer.step != total:
            return
        if note and not started:  # on the first report: a refused folder shows only its error
            progress("note", 0, 0, note)
        started.append(True)
        progress("train", trainer.step, total, train_info(trainer))

    if job.engine.cold():  # at once, before the task's data is even built
        progress("note", 0, 0, compile_notice())
    return train(job, resume=resume, progress=report)


# --------------------------------------------------------------------------- figures

FORMATS = ("png", "pdf", "svg")
# Fixed metadata keeps vector files byte-identical between runs (no creation dates).
METADATA = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None},
    "svg": {"Date": None},
}


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower().lstrip(".") for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise FlatformerError(f"--format takes a comma list of {', '.join(FORMATS)}, got {text!r}")
    return list(dict.fromkeys(formats))


def select(names: list[str], only: str | None) -> list[str]:
    """The figures to draw: all, or those matching a comma list of names or name prefixes."""
    if not only:
        return names
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    picked = [n for n in names if any(n == w or n.startswith(w) for w in wanted)]
    unknown = [w for w in wanted if not any(n == w or n.startswith(w) for n in names)]
    if unknown:
        raise FlatformerError(
            f"--only: no figure named {unknown[0]!r}; figures: {', '.join(names)}"
        )
    return picked


def save(fig, path: Path, fmt: str):
    """Write a figure atomically (a killed run never leaves half a file)."""
    import matplotlib

    from ..figures.panels import RC
    from ..figures.style import DPI
    from ..store.write import atomic_write

    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):  # vector text settings apply when the file is written
        fig.savefig(buffer, format=fmt, dpi=DPI, metadata=METADATA[fmt])
    atomic_write(path, buffer.getvalue())


_JOB: dict = {}  # what a forked worker draws from: set by draw_suite before the fork


def draw_one(name: str) -> tuple[str, list[Path], str | None]:
    """Draw and save one figure of the current job: (name, written paths, skip message)."""
    from ..readout import NotApplicable

    ctx, folder, formats = _JOB["ctx"], _JOB["folder"], _JOB["formats"]
    compute, draw = _JOB["figures"][name]
    try:
        fig = draw(compute(ctx))
    except NotApplicable as exc:  # not in the plane, not this architecture, not this task
        return name, [], f"skipped {name}: {exc}"
    paths = []
    for fmt in formats:
        paths.append(folder / f"{name}.{fmt}")
        save(fig, paths[-1], fmt)
    return name, paths, None


def _die_with(parent: int):
    """Make this forked worker end when `parent` does, even by SIGKILL: on Linux the kernel
    kills it at once (PR_SET_PDEATHSIG), elsewhere the sweep's watcher thread notices. An
    orphaned worker would otherwise keep drawing, and growing, on its own."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)
    else:
        from ..sweep.worker import _watch_parent

        _watch_parent(parent)


def _serve(conn, parent: int):
    """A drawing process: draw each figure name the parent sends and send back ("done",
    draw_one's result) or ("error", the exception), until the parent sends None or is gone."""
    import signal

    _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends us
    while True:
        try:
            name = conn.recv()
        except EOFError:
            return
        if name is None:
            return
        try:
            reply = ("done", draw_one(name))
        except BaseException as exc:  # the parent raises it, as if drawn there
            reply = ("error", exc)
        try:
            conn.send(reply)
        except Exception as exc:  # an exception that does not pickle travels as its text
            error = reply[1] if reply[0] == "error" else exc
            conn.send(("error", RuntimeError(f"{type(error).__name__}: {error}")))


class Workers:
    """`n` forked drawing processes, each given one figure at a time, so the parent always
    knows which figure a process is drawing. A process that dies (the kernel kills one that
    runs out of memory) ends the command with one line naming that figure, where a
    multiprocessing.Pool would wait forever for a result that never comes."""

    def __init__(self, n: int):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.procs, self.conns = [], []
        for _ in range(n):
            here, there = context.Pipe()
            proc = context.Process(target=_serve, args=(there, os.getpid()), daemon=True)
            proc.start()
            there.close()
            self.procs.append(proc)
            self.conns.append(here)

    def draw(self, names: list[str]):
        """draw_one's result for each of `names`, in the order they finish."""
        from multiprocessing.connection import wait

        todo = list(names)
        drawing: dict[int, str] = {}  # worker index -> the figure it is drawing
        for i in range(min(len(self.procs), len(todo))):
            drawing[i] = todo.pop(0)
            self.conns[i].send(drawing[i])
        while drawing:
            ready = wait(
                [self.conns[i] for i in drawing] + [self.procs[i].sentinel for i in drawing]
            )
            for i in list(drawing):
                # A result already sent counts even when its process died just after.
                if self.conns[i] in ready or self.conns[i].poll():
                    try:
                        kind, value = self.conns[i].recv()
                    except EOFError:
                        raise self._died(i, drawing[i]) from None
                    if kind == "error":
                        raise value
                    yield value
                    del drawing[i]
                    if todo:
                        drawing[i] = todo.pop(0)
                        self.conns[i].send(drawing[i])
                elif self.procs[i].sentinel in ready:
                    raise self._died(i, drawing[i])

    def _died(self, i: int, name: str) -> FlatformerError:
        import signal

        proc = self.procs[i]
        proc.join(1)
        code = proc.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
            if -code == signal.SIGKILL:
                how += " (as the kernel does to a process that runs out of memory)"
        else:
            how = f"exited with code {code}"
        return FlatformerError(
            f"drawing {name}: its process {how}; draw it alone to see why (--only {name} --jobs 1)"
        )

    def close(self):
        """End every worker (at once: a figure half drawn is worth nothing) and reap it."""
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


def draw_suite(
    run_path: Path,
    step: int | None = None,
    sequence: str | None = None,
    formats=("png",),
    out_dir: Path | None = None,
    only: str | None = None,
    jobs: int = 2,
    progress: Progress = quiet,
):
    """Draw every selected figure, in `jobs` forked processes; returns (context, folder,
    written paths, skip messages)."""
    import multiprocessing

    from ..figures import FigureContext, figures_for
    from ..readout import NotApplicable
    from ..store.runs import load_run
    from ..store.layout import figures_folder
    from ..store.write import OUTPUT_SUFFIXES, claim_folder, holds_only, make_folder

    figure_files = holds_only(*OUTPUT_SUFFIXES)
    if out_dir:
        claim_folder(out_dir, "--out", figure_files)
    run = load_run(run_path)
    ctx = FigureContext(run, step, sequence)
    check_figures_memory(run.cfg, jobs, ctx.resolution)
    registry = figures_for(run.task)
    names = select(list(registry), only)
    folder = Path(out_dir) if out_dir else figures_folder(run.path, ctx.step)
    what = "--out" if out_dir else "figure folder"
    make_folder(claim_folder(folder, what, figure_files), what)
    # Shared computations happen once, before any fork, so workers inherit them.
    ctx.trace, ctx.projections, ctx.embeddings, ctx.limits
    try:
        ctx.landscape
    except NotApplicable:
        pass
    if any(n.startswith("grok") for n in names):
        ctx.grokking  # modular-addition: the measures over every checkpoint, once for all
    _JOB.update(ctx=ctx, folder=folder, formats=list(formats), figures=registry)
    written, skipped = [], []
    forking = jobs > 1 and len(names) > 1 and "fork" in multiprocessing.get_all_start_methods()
    # Workers fork before the caller's progress display draws (a display may run a refresh
    # thread, and a lock held by another thread would stay locked in the child).
    workers = Workers(min(jobs, len(names))) if forking else None
    try:
        progress("figures", 0, len(names), "")
        results = workers.draw(names) if workers else map(draw_one, names)
        for done, (name, paths, message) in enumerate(results, 1):
            written += paths
            skipped += [message] if message else []
            progress("figures", done, len(names), name)
    finally:
        if workers:
            workers.close()
    _JOB.clear()
    order = {n: i for i, n in enumerate(names)}
    skipped.sort(key=lambda m: order[m.split()[1].rstrip(":")])
    written.sort(key=lambda p: (order[p.stem], p.suffix))
    return ctx, folder, written, skipped


# --------------------------------------------------------------------------- movies

MAX_FPS = 50  # browsers play GIF delays under 20 ms at 100 ms, so faster GIFs would be slower


def check_figures_memory(cfg, jobs: int, resolution: int, memory: int | None = None):
    """Refuse figures whose drawing processes need more than the machine's memory, with the
    --jobs that fits."""
    from ..store.resources import available_memory, check_memory, figures_memory

    memory = available_memory() if memory is None else memory
    fit = max(
        (n for n in range(1, jobs) if figures_memory(cfg, n, resolution) <= (memory or 0)),
        default=0,
    )
    hint = f"--jobs {fit} would fit" if fit else "free some memory"
    check_memory(
        figures_memory(cfg, jobs, resolution), f"drawing with {jobs} processes", hint, memory
    )


def write_movies(
    run_dir: Path,
    movies: str | None = None,
    formats: str | None = None,
    fps: int = 20,
    head: int = 0,
    workers: int = 2,
    out_dir: Path | None = None,
    progress: Progress = quiet,
    every: int = 1,
    note=lambda line: None,
    memory: int | None = None,
) -> tuple[dict[str, list[Path]], dict[str, str]]:
    """Render the movies of the run in `run_dir` to `out_dir` (default RUN/movies), one frame
    per `every`-th checkpoint; returns ({movie: [paths]}, {movie this model cannot have: why}).
    The memory it needs is estimated first, told to `note` and refused when over `memory`
    (default: what the machine has available)."""
    if not 1 <= fps <= MAX_FPS:
        raise FlatformerError(f"--fps must be between 1 and {MAX_FPS}, got {fps}")
    processes("--workers", workers)
    from .. import movies as mv
    from ..store.runs import load_run
    from ..store.write import OUTPUT_SUFFIXES, claim_folder, holds_only

    movie_files = holds_only(*OUTPUT_SUFFIXES)  # a killed render's .NAME.partJ files included
    if out_dir:
        claim_folder(out_dir, "--out", movie_files)
    run = load_run(run_dir)
    names = mv.movie_names(movies, run.config.get("task"))
    chosen = mv.formats(formats)
    estimate = check_movie_memory(run, names, every, workers, memory)
    progress("movies", 0, 0, "loading checkpoints and computing every frame")
    ck = mv.load_checkpoints(run, every=every)
    scenes, skipped = mv.prepare(ck, names, head)
    if not scenes:
        raise FlatformerError("none of the requested movies can be made for this run")
    note(estimate)  # once every option is proven good, so a refusal stays one line
    folder = claim_folder(
        Path(out_dir) if out_dir else run.path / "movies",
        "--out" if out_dir else "movie folder",
        movie_files,
    )
    total = sum(len(s) for s in scenes)
    label = f"{len(scenes)} movies x {len(ck)} frames"
    progress("movies", 0, total, label)
    written = mv.render(
        scenes,
        folder,
        chosen,
        fps,
        workers,
        progress=lambda done: progress("movies", done, total, label),
    )
    return written, skipped


def check_movie_memory(
    run, names: list[str], every: int, workers: int, memory: int | None = None
) -> str:
    """The movies' memory (resources.movie_memory) refused, with the --every (or --movies) that
    fits, when the machine has less; else the estimate as a line to show."""
    from ..movies.frames import every_nth
    from ..store.resources import available_memory, check_memory, gb, movie_memory

    if not 1 <= every <= 10**6:
        raise FlatformerError(f"--every must be a whole number in 1..1,000,000, got {every}")
    steps = run.steps
    frames = len(every_nth(steps, every))
    needed = movie_memory(run.cfg, frames, len(names), workers)
    memory = available_memory() if memory is None else memory
    if memory is None or needed <= memory:
        return f"estimate: {len(names)} movies x {frames} frames, about {gb(needed)} of memory"
    fit = next(
        (
            n
            for n in range(every + 1, len(steps) + 1)
            if movie_memory(run.cfg, len(every_nth(steps, n)), len(names), workers) <= memory
        ),
        None,
    )
    if fit is not None and len(every_nth(steps, fit)) >= 2:
        hint = f"--every {fit} would fit ({len(every_nth(steps, fit))} frames)"
    elif len(names) > 1 and movie_memory(run.cfg, frames, 1, workers) <= memory:
        hint = f"one movie at a time would fit (--movies {names[0]})"
    else:
        hint = "not even two frames fit: free some memory"
    check_memory(needed, f"{len(names)} movies of {frames} frames", hint, memory)


# --------------------------------------------------------------------------- explorer, analysis


def write_explorer(run, path: Path, progress: Progress = quiet) -> Path:
    """The run's live explorer page, written to `path`."""
    from ..explorer.export import export_run
    from ..explorer.page import page_html
    from ..store.write import atomic_write

    progress("explorer", 0, 1, "exporting every checkpoint")
    atomic_write(Path(path), page_html(export_run(run)).encode("utf-8"))
    progress("explorer", 1, 1, str(path))
    return Path(path)


def write_analysis(run, path: Path, progress: Progress = quiet) -> dict:
    """The measured analysis of the run's last checkpoint (`analysis.report.analyze`), written
    to `path` as JSON; returns it."""
    from ..analysis.report import analyze
    from ..store.write import atomic_write

    progress("analysis", 0, 1, "interventions, lenses, circuits and the algorithm")
    analysis = analyze(run)
    atomic_write(Path(path), (json.dumps(analysis, indent=1) + "\n").encode())
    progress("analysis", 1, 1, str(path))
    return analysis
