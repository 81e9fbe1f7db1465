"""The modular-addition task's own figures: the progress measures of Nanda et al. 2023 on a log
step axis (grok01) and the embedding's Fourier spectrum over training (grok02). The numbers come
from analysis/grokking.py; this module only draws them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.ticker import NullFormatter

from . import style
from .context import FigureContext
from .panels import cmap, colorbar, finish, new_figure, styled

PHASE_NAMES = {
    "memorisation": "memorised",
    "circuit_formation": "clean-up starts",
    "cleanup": "clean-up ends",
}


@dataclass
class Progress:
    steps: np.ndarray
    curves: dict  # name -> values per checkpoint
    phases: dict  # phase -> step it ends (or None)
    keys: list[int]
    chance: float
    step: int
    title: str


def compute_progress(ctx: FigureContext) -> Progress:
    g = ctx.grokking
    names = (
        "train_loss",
        "test_loss",
        "restricted_loss",
        "excluded_loss",
        "train_accuracy",
        "test_accuracy",
        "weight_norm",
    )
    return Progress(
        np.array(g["steps"]),
        {n: np.array(g[n]) for n in names},
        g["phases"],
        g["key_frequencies"],
        float(np.log(len(ctx.vocab))),
        ctx.step,
        ctx.title,
    )


def log_steps(steps: np.ndarray) -> np.ndarray:
    """Steps on a log axis: step 0 is drawn at half the first positive step."""
    positive = steps[steps > 0]
    return np.where(steps > 0, steps, positive.min() / 2 if positive.size else 1)


def mark_phases(ax, phases: dict):
    for name, step in phases.items():
        if step:
            ax.axvline(step, color="#777777", lw=0.6, ls=":")


@styled
def draw_progress(data: Progress, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 2.4, fig)
    ax_loss, ax_acc, ax_norm = fig.subplots(1, 3, width_ratios=[1.4, 1, 0.8])
    x = log_steps(data.steps)
    lines = [
        ("train_loss", "train", style.PALETTE[4], "-"),
        ("test_loss", "test", style.PALETTE[0], "-"),
        ("restricted_loss", "restricted (key freqs only)", style.PALETTE[2], "--"),
        ("excluded_loss", "excluded (key freqs removed)", style.PALETTE[3], "--"),
    ]
    for name, label, color, ls in lines:
        ax_loss.plot(
            x, np.maximum(data.curves[name], 1e-12), color=color, ls=ls, lw=1.0, label=label
        )
    ax_loss.axhline(data.chance, color="#999999", ls=":", lw=0.8, label="uniform guess")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("loss at = (nats)")
    ax_loss.legend(frameon=False, fontsize=5.2)
    ax_loss.set_title("Loss at =")
    ax_acc.plot(x, 100 * data.curves["train_accuracy"], color=style.PALETTE[4], label="train")
    ax_acc.plot(x, 100 * data.curves["test_accuracy"], color=style.PALETTE[0], label="test")
    ax_acc.set_ylim(-2, 102)
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.legend(frameon=False)
    ax_acc.set_title("Accuracy")
    ax_norm.plot(x, data.curves["weight_norm"], color="#444444")
    ax_norm.set_ylabel("sum of squared weights")
    ax_norm.set_title("Weight norm")
    for ax in (ax_loss, ax_acc, ax_norm):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("training step (log)")
        mark_phases(ax, data.phases)
        ax.axvline(max(data.step, x.min()), color="#555555", lw=0.6, ls="--")
        ax.spines[["top", "right"]].set_visible(False)
    ends = ", ".join(f"{PHASE_NAMES[k]} {v}" for k, v in data.phases.items() if v)
    note = (
        f"dotted: phase boundaries ({ends or 'none reached'}); dashed: this checkpoint; "
        f"key frequencies {data.keys}"
    )
    return finish(fig, note, f"Progress measures (Nanda et al. 2023): {data.title}", fontsize=8)


@dataclass
class Spectrum:
    steps: np.ndarray
    norms: np.ndarray  # (checkpoints, frequencies 0 .. p // 2)
    keys: list[int]
    step: int
    title: str


def compute_spectrum(ctx: FigureContext) -> Spectrum:
    g = ctx.grokking
    return Spectrum(
        np.array(g["steps"]),
        np.array(g["embedding_spectrum"]),
        g["key_frequencies"],
        ctx.step,
        ctx.title,
    )


@styled
def draw_spectrum(data: Spectrum, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 2.4, fig)
    ax_map, ax_now = fig.subplots(1, 2, width_ratios=[1.5, 1])
    k = np.arange(data.norms.shape[1])
    image = ax_map.imshow(
        data.norms.T,
        origin="lower",
        aspect="auto",
        cmap=cmap("viridis"),
        extent=(-0.5, len(data.steps) - 0.5, -0.5, k[-1] + 0.5),
    )
    ticks = np.unique(np.linspace(0, len(data.steps) - 1, 6).round().astype(int))
    ax_map.set_xticks(ticks, [str(data.steps[i]) for i in ticks])
    ax_map.set_xlabel("checkpoint (step)")
    ax_map.set_ylabel("frequency k (0: constant)")
    ax_map.set_yticks(data.keys, [str(f) for f in data.keys])
    ax_map.set_title("Norm of each frequency of the embedding, over training")
    colorbar(fig, image, ax_map, "norm")
    now = int(np.searchsorted(data.steps, data.step))
    colors = ["#C0392B" if f in data.keys else "#999999" for f in k]
    ax_now.bar(k, data.norms[min(now, len(data.steps) - 1)], color=colors, width=0.8)
    ax_now.set_xlabel("frequency k")
    ax_now.set_ylabel("norm")
    ax_now.set_title(f"At step {data.step} (red: key frequencies)")
    ax_now.spines[["top", "right"]].set_visible(False)
    return finish(
        fig,
        "the Fourier basis over Z_p: constant, cos(2 pi k x / p), sin(...); "
        "norm of a frequency = root of its summed squared coefficients over d_model",
        f"Embedding spectrum: {data.title}",
        fontsize=8,
    )
