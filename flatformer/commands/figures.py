"""`flatformer figures`: draw the paper's figure suite for one checkpoint of a run."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Optional

import typer

from ..cli import app, console, out, progress_display
from ..errors import FlatformerError
from ..limits import processes

FORMATS = ("png", "pdf", "svg")
# Fixed metadata keeps vector files byte-identical between runs (no creation dates).
METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None},
            "svg": {"Date": None}}


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower().lstrip(".") for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise FlatformerError(f"--format takes a comma list of {', '.join(FORMATS)}, "
                              f"got {text!r}")
    return list(dict.fromkeys(formats))


def select(names: list[str], only: str | None) -> list[str]:
    """The figures to draw: all, or those matching a comma list of names or name prefixes."""
    if not only:
        return names
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    picked = [n for n in names if any(n == w or n.startswith(w) for w in wanted)]
    unknown = [w for w in wanted if not any(n == w or n.startswith(w) for n in names)]
    if unknown:
        raise FlatformerError(f"--only: no figure named {unknown[0]!r}; figures: "
                              f"{', '.join(names)}")
    return picked


def save(fig, path: Path, fmt: str):
    """Write a figure atomically (a killed run never leaves half a file)."""
    import matplotlib

    from ..figures.panels import RC
    from ..figures.style import DPI
    from ..runs import atomic_write
    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):   # vector text settings apply when the file is written
        fig.savefig(buffer, format=fmt, dpi=DPI, metadata=METADATA[fmt])
    atomic_write(path, buffer.getvalue())


_JOB: dict = {}   # what a forked worker draws from: set by draw_suite before the fork


def draw_one(name: str) -> tuple[str, list[Path], str | None]:
    """Draw and save one figure of the current job: (name, written paths, skip message)."""
    from ..figures import NotInPlane
    ctx, folder, formats = _JOB["ctx"], _JOB["folder"], _JOB["formats"]
    compute, draw = _JOB["figures"][name]
    try:
        fig = draw(compute(ctx))
    except NotInPlane as exc:
        return name, [], f"skipped {name}: {exc}"
    paths = []
    for fmt in formats:
        paths.append(folder / f"{name}.{fmt}")
        save(fig, paths[-1], fmt)
    return name, paths, None


def draw_suite(run_path: Path, step: int | None, sequence: str | None, formats: list[str],
               out_dir: Path | None, only: str | None, jobs: int = 2):
    """Draw every selected figure, in `jobs` forked processes; returns (context, folder,
    written paths, skip messages)."""
    import multiprocessing

    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..figures import FigureContext, NotInPlane, figures_for
    from ..runs import load_run
    run = load_run(run_path)
    ctx = FigureContext(run, step, sequence)
    registry = figures_for(run.task)
    names = select(list(registry), only)
    folder = Path(out_dir) if out_dir else run.path / "figures" / f"step_{ctx.step:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    # Shared computations happen once, before any fork, so workers inherit them.
    ctx.trace, ctx.projections, ctx.embeddings, ctx.limits
    try:
        ctx.landscape
    except NotInPlane:
        pass
    if any(n.startswith("grok") for n in names):
        ctx.grokking   # modular-addition: the measures over every checkpoint, once for all
    _JOB.update(ctx=ctx, folder=folder, formats=formats, figures=registry)
    written, skipped = [], []
    progress = progress_display(TextColumn("figures"), BarColumn(bar_width=None),
                                MofNCompleteColumn(), TextColumn("{task.description}"),
                                TimeElapsedColumn(), transient=True)
    forking = jobs > 1 and len(names) > 1 and "fork" in multiprocessing.get_all_start_methods()
    # Workers fork before the progress display starts its refresh thread: a fork copies only
    # the forking thread, and a lock held by another thread would stay locked in the child.
    pool = multiprocessing.get_context("fork").Pool(min(jobs, len(names))) if forking else None
    try:
        with progress:
            bar = progress.add_task("", total=len(names))
            results = pool.imap_unordered(draw_one, names) if pool else map(draw_one, names)
            for name, paths, message in results:
                written += paths
                skipped += [message] if message else []
                progress.update(bar, advance=1, description=name)
    finally:
        if pool:
            pool.terminate()
            pool.join()
    _JOB.clear()
    order = {n: i for i, n in enumerate(names)}
    skipped.sort(key=lambda m: order[m.split()[1].rstrip(":")])
    written.sort(key=lambda p: (order[p.stem], p.suffix))
    return ctx, folder, written, skipped


@app.command()
def figures(
    run: Path = typer.Argument(..., help="A run folder."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [last]."),
    sequence: Optional[str] = typer.Option(None, help="Space-separated tokens to trace "
                                           "[the task's demo, e.g. \"4 1 + 4 6 9 5 +\"]."),
    fmt: str = typer.Option("png", "--format", help="Comma list of png, pdf, svg."),
    out_dir: Optional[Path] = typer.Option(None, "--out",
                                           help="Output folder [RUN/figures/step_XXXXXX]."),
    only: Optional[str] = typer.Option(None, help="Comma list of figure names or prefixes, "
                                       "e.g. fig10,supp_qk_full."),
    jobs: int = typer.Option(2, help="Processes drawing in parallel (1: no forking)."),
):
    """Draw the paper's figures (fig02 to fig15 and the supplementary ones) for a checkpoint;
    for modular-addition first its progress measures and embedding spectrum (grok01, grok02)."""
    formats = parse_formats(fmt)
    processes("--jobs", jobs)
    started = time.perf_counter()
    ctx, folder, written, skipped = draw_suite(run, step, sequence, formats, out_dir,
                                                  only, jobs)
    for message in skipped:
        console.print(message, markup=False, highlight=False, soft_wrap=True)
    seconds = time.perf_counter() - started
    n = len(written) // len(formats)
    out.print(f"{folder}: {n} figures ({', '.join(formats)}) for step {ctx.step}, "
              f"sequence \"{' '.join(ctx.trace.token_text)}\" ({seconds:.1f} s)",
              markup=False, highlight=False, soft_wrap=True)
