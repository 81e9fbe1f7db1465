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
from rich.table import Table
from rich.text import Text

from ..store.limits import strict_json
from ..errors import FlatformerError
from ..tasks.base import LEARNED
from .app import app, console, out


def summary_table(rows) -> Table:
    """One row per structure; the structure and the verdict wrap, so it fits 80 columns."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("structure", justify="left", ratio=3)
    table.add_column("learned\nseeds", justify="right", no_wrap=True)
    table.add_column("failed\nseeds", justify="right", no_wrap=True)
    table.add_column("verdict", justify="left", ratio=1, min_width=10)
    for row in rows:
        verdict = row["verdict"]
        if "worst_successful_share" in row and row["successful"] < row["n_successful"]:
            verdict += f" (worst seed at {row['worst_successful_share']:.1%})"
        table.add_row(
            Text(row["structure"]),
            f"{row['successful']}/{row['n_successful']}",
            f"{row['failed']}/{row['n_failed']}",
            Text(verdict),
        )
    return table


# Each structure of the per-seed table gets one letter: its column of marks stays 9 characters
# wide, and the legend under the table says what each letter is.
PER_SEED = [
    ("tokens_separable", "T", "even / odd / + tokens separable"),
    ("points_separable", "P", "token + position points separable"),
    ("wanted_collinear", "L", "even tokens on a line"),
    ("ladder", "D", "positions a monotone ladder"),
    ("queries_separate", "Q", "+ queries apart"),
    ("recency_weights", "W", "recency in the weights"),
    ("recency_windows", "R", "recency in the data"),
    ("zones_once", "Z", "each zone crossed once"),
    ("zones_follow_line", "O", "zones in the line's order"),
]


def _mark(value) -> str:
    return "✓" if value else "✗"


def seed_table(c) -> tuple[Table, str]:
    """One row per seed: rule error, alignment, a mark per structure, the orders; and the
    legend of the structure letters. Fits 80 columns."""
    shown = [(key, letter, what) for key, letter, what in PER_SEED if key in c.measures]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("seed", "rule\nerror", "resi-\ndual", "re-\nflect"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("structures\n" + "".join(letter for _, letter, _ in shown), no_wrap=True)
    for name in ("line order", "zone order"):
        table.add_column(name, justify="left", overflow="fold")
    for s, seed in enumerate(c.seeds):
        reflect = "ref" if s == c.reference else _mark(np.linalg.det(c.R[s]) < 0)
        table.add_row(
            str(seed),
            f"{c.rule_error[s]:.2%}",
            f"{c.residual[s]:.2f}",
            reflect,
            "".join(_mark(c.measures[key][s]) for key, _, _ in shown),
            Text(c.order_text(c.line_order[s])),
            Text(c.order_text(c.zone_order[s])),
            style=None if c.successful[s] else "red",
        )
    legend = "structures: " + "; ".join(f"{letter} {what}" for _, letter, what in shown)
    return table, legend


def grokking_table(rows: list[dict]):
    """modular-addition: each seed's key frequencies and its algorithm (Zhong et al. 2023)."""
    out.print()
    out.print(
        Text(
            "Each seed's key frequencies and algorithm (clock or pizza: Zhong et al. "
            "2023; none unless >= 99% of all pairs are right)",
            style="bold",
        )
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for i, column in enumerate(
        ["seed", "key frequencies", "distance\nirrelevance", "gradient\nsymmetricity", "algorithm"]
    ):
        table.add_column(column, justify="left" if i in (1, 4) else "right", overflow="fold")
    for r in rows:
        table.add_row(
            str(r["seed"]),
            " ".join(map(str, r["key_frequencies"])),
            f"{r['distance_irrelevance']:.2f}",
            f"{r['gradient_symmetricity']:.2f}",
            r["name"],
        )
    out.print(table)
    shared = set.intersection(*(set(r["key_frequencies"]) for r in rows))
    out.print(
        Text(f"key frequencies every seed shares: {' '.join(map(str, sorted(shared))) or 'none'}")
    )


def save_figure(fig, path: Path):
    from ..figures.style import DPI
    from ..store.write import atomic_write

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    atomic_write(path, buffer.getvalue())


def check_compare_memory(run: Path, figures: bool, memory: int | None = None):
    """Refuse before loading a comparison larger than the machine's memory; the estimate on
    stderr."""
    from ..store.resources import available_memory, check_memory, compare_memory, gb
    from ..store.runs import seed_runs

    runs = seed_runs(run)
    if len(runs) < 2:
        return  # compare_runs refuses it in one line
    cfg, n = runs[0].cfg, len(runs)
    plane = figures and cfg.d_model == 2
    needed = compare_memory(cfg, n, plane)
    memory = available_memory() if memory is None else memory
    hint = (
        "--no-figures would fit (no aligned landscapes)"
        if plane and compare_memory(cfg, n, False) <= (memory or 0)
        else "free some memory, or compare a --seeds folder of fewer seeds"
    )
    check_memory(needed, f"comparing {n} seeds of {cfg.n_params:,} parameters", hint, memory)
    console.print(
        f"estimate: {n} seeds, about {gb(needed)} of memory", markup=False, highlight=False
    )


@app.command()
def compare(
    run: Path = typer.Argument(..., help="A --seeds run folder (DIR/seed_S/)."),
    step: Optional[int] = typer.Option(None, help="Checkpoint step [the last all seeds share]."),
    reference: Optional[int] = typer.Option(
        None, help="Seed the others are aligned to [the first successful seed]."
    ),
    success: float = typer.Option(
        LEARNED, help="Rule error at or below which a seed has learned the task."
    ),
    out_dir: Optional[Path] = typer.Option(
        None, "--out", help="Folder for the figures and summary.json [RUN/compare]."
    ),
    figures: bool = typer.Option(True, help="Draw the figures."),
    seeds_table: bool = typer.Option(
        True, "--per-seed/--no-per-seed", help="Print the table of every seed."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
):
    """Align every seed's geometry to a reference seed and report which structures hold in every
    seed that learned the task (necessary) and which vary."""
    if not 0 <= success <= 1:
        raise FlatformerError(f"--success is a rule error between 0 and 1, got {success}")
    from ..compare import aligned_landscapes, compare_runs, numbers, summary, to_json
    from ..readout import NotApplicable
    from ..store.write import OUTPUT_SUFFIXES, atomic_write, claim_folder, holds_only, make_folder

    folder = claim_folder(
        out_dir or Path(run) / "compare",
        "--out" if out_dir else "compare folder",
        holds_only(*OUTPUT_SUFFIXES),
    )
    check_compare_memory(run, figures)
    started = time.perf_counter()
    c = compare_runs(run, step, reference, success)
    report = to_json(c)
    make_folder(folder, "--out")
    written = [folder / "summary.json"]
    if figures:
        from ..compare import figures as F

        drawn = {
            "embeddings": F.draw_embedding_grid(c),
            "rule_errors": F.draw_rule_errors(c),
            "invariants": F.draw_invariants(c),
        }
        if c.cfg.d_model == 2:
            try:
                drawn["landscapes"] = F.draw_landscape_grid(c, aligned_landscapes(c))
            except NotApplicable as exc:  # a parallel block has no landscape of z
                console.print(f"skipping landscapes: {exc}", markup=False, highlight=False)
        for name, fig in drawn.items():
            written.append(folder / f"{name}.png")
            save_figure(fig, written[-1])
    seconds = time.perf_counter() - started
    report["seconds"] = round(seconds, 2)
    atomic_write(written[0], (json.dumps(report, indent=1) + "\n").encode())
    if as_json:
        print(strict_json(report))
        return
    nums = numbers(c)
    out.print(
        Text(
            f"{run}: {len(c.seeds)} seeds of {c.task.name} at step {c.step}; "
            f"{int(c.successful.sum())} learned it (rule error <= {success:.0%}: median "
            f"{nums['rule_error']['median']:.2%}, worst {nums['rule_error']['max']:.2%})"
        )
    )
    out.print(
        Text(
            f"aligned to seed {c.seeds[c.reference]} by orthogonal maps: relative residual of the "
            f"embedding points median {nums['residual']['median']:.3f} (max "
            f"{nums['residual']['max']:.3f}), of the joint q/k points median "
            f"{nums['qk_residual']['median']:.3f}; 0 = the same geometry"
            + ("" if c.symmetric else " (with LayerNorm the rotation is no symmetry)")
        )
    )
    if seeds_table:
        out.print()
        out.print(Text("Every seed", style="bold"))
        table, legend = seed_table(c)
        out.print(table)
        out.print(Text(legend))
    if report["grokking"]:
        grokking_table(report["grokking"])
    out.print()
    out.print(Text("Which structures hold in every seed that learned the task", style="bold"))
    rows = summary(c)
    out.print(summary_table(rows))
    for row in rows:
        if "order" in row and row["n_successful"]:
            out.print(
                Text(
                    f"most common {row['structure']}: {row['order']} "
                    f"({row['successful']} of {row['n_successful']} successful seeds)"
                )
            )
    out.print(
        f"wrote {', '.join(p.name for p in written)} to {folder} ({seconds:.1f} s)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
