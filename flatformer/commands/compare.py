"""`flatformer compare`: which geometry every seed that learned the task shares, and which is
each seed's own choice."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cli import app, out
from ..errors import FlatformerError


def summary_table(rows) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("structure", justify="left", no_wrap=True)
    table.add_column("in successful\nseeds", justify="right")
    table.add_column("in failed\nseeds", justify="right")
    table.add_column("verdict", justify="left", no_wrap=True)
    for row in rows:
        verdict = row["verdict"]
        if "worst_successful_share" in row and row["successful"] < row["n_successful"]:
            verdict += f" (worst seed at {row['worst_successful_share']:.1%})"
        table.add_row(Text(row["structure"]), f"{row['successful']}/{row['n_successful']}",
                      f"{row['failed']}/{row['n_failed']}", Text(verdict))
    return table


PER_SEED = [("tokens_separable", "tok\nsep"), ("points_separable", "pts\nsep"),
            ("wanted_collinear", "on a\nline"), ("ladder", "lad-\nder"),
            ("queries_separate", "q\nsep"), ("recency_weights", "rec.\nW"),
            ("recency_windows", "rec.\ndata"), ("zones_once", "zones\nonce"),
            ("zones_follow_line", "zones\n= line")]
WIDTH = 120   # tables are printed at least this wide (a pipe would otherwise get 80 columns)


def wide() -> Console:
    """The output console, at least WIDTH columns wide: rich gives a pipe 80 columns, and the
    tables are unreadable folded that narrow."""
    return Console(file=out.file, width=max(out.width, WIDTH), force_terminal=out.is_terminal,
                   no_color=out.no_color)


def _mark(value) -> str:
    return "✓" if value else "✗"


def seed_table(c) -> Table:
    """One row per seed: rule error, alignment, each structure, the orders."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ["seed", "rule\nerror", "resi-\ndual", "re-\nflect"] + \
        [label for key, label in PER_SEED if key in c.measures] + ["line order", "zone order"]
    for name in columns:
        table.add_column(name, justify="left" if name.endswith("order") else "right",
                         no_wrap=True)
    for s, seed in enumerate(c.seeds):
        reflect = "ref" if s == c.reference else _mark(np.linalg.det(c.R[s]) < 0)
        cells = [str(seed), f"{c.rule_error[s]:.2%}", f"{c.residual[s]:.2f}", reflect]
        cells += [_mark(c.measures[key][s]) for key, _ in PER_SEED if key in c.measures]
        cells += [Text(c.order_text(c.line_order[s])), Text(c.order_text(c.zone_order[s]))]
        table.add_row(*cells, style=None if c.successful[s] else "red")
    return table


def save_figure(fig, path: Path):
    from ..figures.style import DPI
    from ..runs import atomic_write
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    atomic_write(path, buffer.getvalue())


@app.command()
def compare(
    run: Path = typer.Argument(..., help="A --seeds run folder (DIR/seed_S/)."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [the last all seeds share]."),
    reference: Optional[int] = typer.Option(None, help="Seed the others are aligned to "
                                            "[the first successful seed]."),
    success: float = typer.Option(0.01, help="Rule error at or below which a seed has learned "
                                  "the task."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for the figures and "
                                           "summary.json [RUN/compare]."),
    figures: bool = typer.Option(True, help="Draw the figures."),
    seeds_table: bool = typer.Option(True, "--per-seed/--no-per-seed",
                                     help="Print the table of every seed."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
):
    """Align every seed's geometry to a reference seed and report which structures hold in every
    seed that learned the task (necessary) and which vary."""
    if not 0 <= success <= 1:
        raise FlatformerError(f"--success is a rule error between 0 and 1, got {success}")
    from ..compare import aligned_landscapes, compare_runs, numbers, summary, to_json
    started = time.perf_counter()
    c = compare_runs(run, step, reference, success)
    report = to_json(c)
    folder = out_dir or Path(run) / "compare"
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "summary.json"]
    from ..runs import atomic_write
    if figures:
        from .. import compare_figures as F
        drawn = {"embeddings": F.draw_embedding_grid(c), "rule_errors": F.draw_rule_errors(c),
                 "invariants": F.draw_invariants(c)}
        if c.cfg.d_model == 2:
            drawn["landscapes"] = F.draw_landscape_grid(c, aligned_landscapes(c))
        for name, fig in drawn.items():
            written.append(folder / f"{name}.png")
            save_figure(fig, written[-1])
    seconds = time.perf_counter() - started
    report["seconds"] = round(seconds, 2)
    atomic_write(written[0], (json.dumps(report, indent=1) + "\n").encode())
    if as_json:
        print(json.dumps(report))
        return
    nums = numbers(c)
    wide().print(Text(
        f"{run}: {len(c.seeds)} seeds of {c.task.name} at step {c.step}; "
        f"{int(c.successful.sum())} learned it (rule error <= {success:.0%}: median "
        f"{nums['rule_error']['median']:.2%}, worst {nums['rule_error']['max']:.2%})"))
    wide().print(Text(
        f"aligned to seed {c.seeds[c.reference]} by orthogonal maps: relative residual of the "
        f"embedding points median {nums['residual']['median']:.3f} (max "
        f"{nums['residual']['max']:.3f}), of the joint q/k points median "
        f"{nums['qk_residual']['median']:.3f}; 0 = the same geometry"
        + ("" if c.symmetric else " (with LayerNorm the rotation is no symmetry)")))
    if seeds_table:
        out.print()
        out.print(Text("Every seed", style="bold"))
        wide().print(seed_table(c))
    out.print()
    out.print(Text("Which structures hold in every seed that learned the task", style="bold"))
    rows = summary(c)
    wide().print(summary_table(rows))
    for row in rows:
        if "order" in row and row["n_successful"]:
            wide().print(Text(f"most common {row['structure']}: {row['order']} "
                              f"({row['successful']} of {row['n_successful']} successful seeds)"))
    wide().print(f"wrote {', '.join(p.name for p in written)} to {folder} ({seconds:.1f} s)")
