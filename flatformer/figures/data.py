"""Figures about data and training: the training sequences (fig02), the learning curve (fig03)
and sequences the model writes before and after training (fig04)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.colors import ListedColormap

from . import compute as C
from . import style
from .context import FigureContext
from .panels import new_figure, styled

PROMPT, FREE, WRONG, RIGHT = -2, -1, 0, 1
STATUS_COLORS = {PROMPT: "#FFFFFF", FREE: "#E8E8E8", WRONG: "#F4B183", RIGHT: "#A8DCC8"}


@dataclass
class SequenceRows:
    """Sequences as rows of cells: token text and a status per cell (PROMPT, FREE, WRONG,
    RIGHT: whether the rule constrains the position and whether the token obeys it)."""

    title: str
    tokens: list[list[str]]
    status: list[np.ndarray]
    focus: str
    summary: str = ""
    legend: dict | None = None  # status -> its name, where not the rule's (a program's values)
    heading: str = "Training data"


def rows_panel(ax, rows: SequenceRows):
    width = max(len(r) for r in rows.tokens)
    codes = np.full((len(rows.tokens), width), np.nan)
    for i, s in enumerate(rows.status):
        codes[i, : len(s)] = s
    order = sorted(STATUS_COLORS)
    lut = ListedColormap([STATUS_COLORS[k] for k in order]).with_extremes(bad="white")
    ax.imshow(codes, cmap=lut, vmin=order[0] - 0.5, vmax=order[-1] + 0.5, aspect="auto")
    for i, row in enumerate(rows.tokens):
        for j, tok in enumerate(row):
            ax.text(
                j,
                i,
                tok,
                ha="center",
                va="center",
                fontsize=5.2,
                fontweight="bold" if tok == rows.focus else "normal",
                color="#777777" if rows.status[i][j] == PROMPT else "black",
            )
    ax.set_xticks(np.arange(-0.5, width, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows.tokens), 1), minor=True)
    ax.grid(which="minor", color="white", lw=0.8)
    ax.tick_params(which="both", length=0)
    ax.set_yticks(range(len(rows.tokens)), [str(i + 1) for i in range(len(rows.tokens))])
    ax.set_xticks(range(0, width, 5))
    ax.set_xlabel("position in sequence", labelpad=1)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(rows.title + (f"  ({rows.summary})" if rows.summary else ""), loc="left")


PROGRAM_LABELS = {RIGHT: "model's output", WRONG: "model differs", FREE: "no value"}


def status_legend(ax, with_wrong: bool, with_prompt: bool = False, labels: dict | None = None):
    from matplotlib.patches import Patch

    names = {RIGHT: "rule obeyed", WRONG: "rule broken", FREE: "unconstrained"}
    names.update(labels or {})
    items = [(RIGHT, names[RIGHT]), (FREE, names[FREE])]
    if with_wrong:
        items.insert(1, (WRONG, names[WRONG]))
    if with_prompt:
        items.append((PROMPT, "prompt"))
    handles = [
        Patch(facecolor=STATUS_COLORS[k], edgecolor="#999999", lw=0.4, label=t) for k, t in items
    ]
    ax.legend(
        handles=handles,
        loc="upper right",
        bbox_to_anchor=(1.0, 1.0 + 0.5 / 6),
        ncol=len(items),
        frameon=False,
        handlelength=1.2,
        columnspacing=1.0,
        borderaxespad=0,
    )


def compute_training_data(ctx: FigureContext, n: int = 6, width: int = 32) -> SequenceRows:
    """The first `n` training sequences (first `width` tokens), each position marked by whether
    the task's rule constrains it; for a compiled program, its first held-out inputs instead
    (`program_rows`)."""
    if ctx.task.labelled:
        return program_rows(ctx, n)
    train, _ = ctx.split
    seqs = [s[:width] for s in train[:n]]
    status = [C.rule_status(ctx.task, s, n_ctx=len(s) + 1) for s in seqs]
    seed = ctx.run.config.get("data_seed", 0)
    return SequenceRows(
        f"The first {n} training sequences of {ctx.task.name} (data seed {seed}, "
        f"first {width} tokens)",
        [[ctx.vocab[t] for t in s] for s in seqs],
        status,
        ctx.task.focus,
    )


def program_rows(ctx: FigureContext, n: int) -> SequenceRows:
    """`n` of a compiled program's held-out inputs, evenly spaced over them: each cell an input
    value over the program's value there (its class at position i + 1 is the value at input
    position i), green where the model's top class is that value, orange where it is not."""
    from ..tasks.windows import evenly_spaced

    data = ctx.task.labelled_data(ctx.cfg.n_ctx)
    keep = evenly_spaced(len(data.val_inputs), n)
    inputs, targets = data.val_inputs[keep], ctx.task.targets[keep]
    guesses = ctx.model(inputs).argmax(-1)
    classes = ctx.run.vocab_out
    cells = [
        [ctx.vocab[t] + (f"\n→ {classes[c]}" if c >= 0 else "") for t, c in zip(row, want)]
        for row, want in zip(inputs, targets)
    ]
    status = [np.where(want < 0, FREE, got == want) for got, want in zip(guesses, targets)]
    wrong = sum(int((s == WRONG).sum()) for s in status)
    return SequenceRows(
        f"{len(cells)} held-out inputs over the program's values",
        cells,
        status,
        "",
        f"model differs at {wrong} of {int((targets >= 0).sum())}",
        PROGRAM_LABELS,
        "The program's inputs and values",
    )


@styled
def draw_training_data(rows: SequenceRows, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 0.32 * len(rows.tokens) + 0.55, fig)
    ax = fig.add_subplot()
    rows_panel(ax, rows)
    status_legend(ax, with_wrong=rows.legend is not None, labels=rows.legend)
    fig.suptitle(rows.heading, fontsize=8)
    return fig


@dataclass
class LearningCurve:
    steps: np.ndarray
    train_loss: np.ndarray
    val_loss: np.ndarray
    rule_error: np.ndarray
    step: int  # the checkpoint the other figures draw
    chance_loss: float  # ln V: the loss of a uniform guess
    title: str


def compute_learning_curve(ctx: FigureContext) -> LearningCurve:
    rows = ctx.run.metrics
    if not rows:
        raise C.NotDrawn("this run was not trained here: it has no learning curve")
    get = lambda key: np.array([r.get(key, np.nan) for r in rows], dtype=float)  # noqa: E731
    return LearningCurve(
        get("step"),
        get("train_loss"),
        get("val_loss"),
        get("rule_error"),
        ctx.step,
        math.log(len(ctx.vocab)),
        ctx.title,
    )


@styled
def draw_learning_curve(curve: LearningCurve, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 2.0, fig)
    ax_loss, ax_err = fig.subplots(1, 2)
    ax_loss.plot(
        curve.steps, curve.train_loss, color=style.PALETTE[4], lw=0.8, label="training batch"
    )
    ax_loss.plot(curve.steps, curve.val_loss, color=style.PALETTE[0], lw=1.2, label="held out")
    ax_loss.axhline(
        curve.chance_loss,
        color="#999999",
        ls=":",
        lw=0.8,
        label=f"uniform guess (ln {round(math.exp(curve.chance_loss))})",
    )
    ax_loss.set_ylabel("next-token loss (nats)")
    ax_loss.legend(frameon=False)
    ax_err.plot(curve.steps, 100 * curve.rule_error, color=style.WRONG_COLOR, lw=1.2)
    ax_err.set_ylabel("rule error (%)")
    ax_err.set_ylim(-2, 102)
    for ax in (ax_loss, ax_err):
        ax.set_xlabel("training step")
        ax.axvline(curve.step, color="#555555", lw=0.6, ls="--")
        ax.spines[["top", "right"]].set_visible(False)
    if len(curve.rule_error) and np.isfinite(curve.rule_error[-1]):
        ax_err.annotate(
            f"{100 * curve.rule_error[-1]:.1f}%",
            (curve.steps[-1], 100 * curve.rule_error[-1]),
            textcoords="offset points",
            xytext=(-2, 6),
            ha="right",
            fontsize=6,
        )
    ax_loss.set_title("Loss")
    ax_err.set_title("Rule error on held-out constrained positions")
    fig.suptitle(f"Learning curve: {curve.title} (dashed: this checkpoint)", fontsize=8)
    return fig


@dataclass
class Generated:
    panels: list[SequenceRows]  # one per model: the first checkpoint, then the drawn one
    title: str


def compute_generated_sequences(
    ctx: FigureContext, n: int = 5, prompt: int = 4, length: int = 32
) -> Generated:
    """Sequences sampled from the untrained (first checkpoint) and the drawn model, from the same
    prompts (the starts of held-out sequences) and the same random draws."""
    if ctx.task.labelled:
        raise C.NotDrawn(
            "a compiled program's outputs are its values, not next tokens: "
            "fig02 shows them (flatformer generate RUN --prompt prints them)"
        )
    prompts = np.array([s[:prompt] for s in ctx.held_out[:n]])
    panels = []
    first = ctx.run.steps[0]
    for step, model in ((first, ctx.run.model(first)), (ctx.step, ctx.model)):
        seqs = C.generate(model, prompts, length, seed=0)
        status = [C.rule_status(ctx.task, s, ctx.cfg.n_ctx) for s in seqs]
        for s in status:
            s[:prompt] = PROMPT
        counted = np.concatenate([s[s >= 0] for s in status])
        summary = (
            f"{int((counted == WRONG).sum())} of {len(counted)} constrained positions wrong"
            if len(counted)
            else "no constrained positions"
        )
        panels.append(
            SequenceRows(
                f"Sampled by the model at step {step}",
                [[ctx.vocab[t] for t in s] for s in seqs],
                status,
                ctx.task.focus,
                summary,
            )
        )
    return Generated(panels, ctx.title)


@styled
def draw_generated_sequences(data: Generated, fig=None):
    panels = data.panels
    n = len(panels[0].tokens)
    fig = new_figure(style.PAGE_WIDTH, 2 * (0.3 * n + 0.45) + 0.2, fig)
    axes = fig.subplots(len(panels), 1)
    for ax, rows in zip(np.atleast_1d(axes), panels):
        rows_panel(ax, rows)
    status_legend(np.atleast_1d(axes)[0], with_wrong=True, with_prompt=True)
    fig.suptitle(
        f"Sequences sampled before and after training (same prompts, same random "
        f"draws): {data.title}",
        fontsize=8,
    )
    return fig
