"""The phase change of the induction task: training loss, in-context loss and every head's
previous-token and prefix-matching scores over the checkpoints, with the phase step and the
loss bump marked (numbers from analysis/induction.py)."""

from __future__ import annotations

from dataclasses import dataclass


from ..analysis.induction import PhaseChange, phase_change
from . import style
from .context import FigureContext
from .panels import finish, new_figure, styled


@dataclass
class PhaseFigure:
    phase: PhaseChange
    step: int
    title: str


def compute_phase_change(ctx: FigureContext) -> PhaseFigure:
    return PhaseFigure(phase_change(ctx.run), ctx.step, ctx.title)


@styled
def draw_phase_change(data: PhaseFigure, fig=None):
    p = data.phase
    fig = new_figure(style.PAGE_WIDTH, 2.2, fig)
    ax_loss, ax_icl, ax_heads = fig.subplots(1, 3)
    ax_loss.plot(p.steps, p.train_loss, color=style.PALETTE[4], lw=1.0)
    ax_loss.set_ylabel("training loss (nats)")
    if p.bump_step is not None:
        i = p.steps.index(p.bump_step)
        ax_loss.plot(
            [p.bump_step], [p.train_loss[i]], "o", ms=4, mfc="none", color=style.WRONG_COLOR
        )
        ax_loss.annotate(
            "bump",
            (p.bump_step, p.train_loss[i]),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=6,
            color=style.WRONG_COLOR,
        )
    ax_icl.plot(p.steps, p.in_context_loss, color=style.PALETTE[0], lw=1.2)
    ax_icl.axhline(0, color="#999999", lw=0.6, ls=":")
    ax_icl.set_ylabel("late - early loss (nats)")
    L, H = p.prev_token.shape[1:]
    for layer in range(L):
        for h in range(H):
            ls = "-" if layer > 0 else "--"
            ax_heads.plot(
                p.steps,
                p.prefix_matching[:, layer, h] if layer > 0 else p.prev_token[:, layer, h],
                ls=ls,
                lw=1.0,
                color=style.PALETTE[(layer * H + h) % len(style.PALETTE)],
                label=f"{layer}.{h} " + ("prefix-matching" if layer > 0 else "previous-token"),
            )
    ax_heads.set_ylim(-0.02, 1.02)
    ax_heads.set_ylabel("score")
    ax_heads.legend(frameon=False, fontsize=5)
    for ax in (ax_loss, ax_icl, ax_heads):
        ax.axvline(p.phase_step, color="#555555", lw=0.7, ls="--")
        ax.set_xlabel("training step")
        ax.spines[["top", "right"]].set_visible(False)
    ax_loss.set_title("Training loss")
    ax_icl.set_title("In-context loss")
    ax_heads.set_title("Head scores")
    bump = (
        f", loss bump at step {p.bump_step}"
        if p.bump_step is not None
        else ", no loss bump (the training loss only falls)"
    )
    return finish(
        fig,
        "On repeated random tokens: layer 0 previous-token (dashed), later "
        "layers prefix-matching (solid). Vertical line: the phase step (the best "
        "prefix-matching score passes half its rise).",
        f"Induction heads form: {data.title} (phase step {p.phase_step}{bump})",
        fontsize=8,
    )
