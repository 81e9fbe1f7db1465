"""Figures of `flatformer geometry`'s report: the RDM of every activation, activation x
activation similarity, similarity to the final geometry over training, seeds x seeds, and
model versus data with the noise ceiling as a band. Numbers come from the report; this only
draws."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from ..rsa.stimuli import short
from . import style
from .panels import colorbar, finish, heatmap, new_figure, styled


def _square(v, n):
    m = np.zeros((n, n))
    i, j = np.triu_indices(n, 1)
    m[i, j] = m[j, i] = v
    return m


@styled
def rdm_grid(report: dict, kind: str = "euclidean"):
    names = report["activations"]
    cols = 5
    rows = -(-len(names) // cols)
    fig = new_figure(style.PAGE_WIDTH, 1.45 * rows + 0.3)
    axes = fig.subplots(rows, cols, squeeze=False)
    n = len(report["stimuli"])
    for ax, name in zip(axes.flat, names):
        m = _square(np.asarray(report["rdms"][name][kind]), n)
        # ranks, so every panel uses its whole colour range (RSA compares orders)
        ranked = np.argsort(np.argsort(m.ravel())).reshape(m.shape) / m.size
        ax.imshow(ranked, cmap=style.SEQUENTIAL, interpolation="nearest")
        ax.set_title(short(name), fontsize=style.MIN_FONT + 0.5)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    return finish(
        fig,
        f"{n} stimuli in report order; colour = rank of the {kind} dissimilarity (dark = similar)",
        f"RDM of every activation, step {report['step']}",
        fontsize=8,
    )


@styled
def activation_similarity(report: dict, key: str = "linear_cka"):
    label = key.replace("_cka", " CKA").replace("_", " ")
    names = [short(n) for n in report["activations"]]
    fig = new_figure(style.PAGE_WIDTH * 0.7, style.PAGE_WIDTH * 0.62)
    ax = fig.subplots()
    image = heatmap(
        ax, report[key], names, names, cmap_name=style.SEQUENTIAL, vmin=0, vmax=1, annotate=False
    )
    ax.tick_params(axis="x", labelrotation=90, labelsize=style.MIN_FONT)
    ax.tick_params(axis="y", labelsize=style.MIN_FONT)
    colorbar(fig, image, ax, label)
    return finish(fig, "", f"Activation x activation {label}", fontsize=8)


LABELS = {
    "cka": "linear CKA",
    "cka-rbf": "RBF CKA",
    "procrustes": "Procrustes angle (rad)",
    "spearman": "RDM Spearman",
    "tau-a": "RDM Kendall tau-a",
    "cosine": "RDM whitened cosine",
}


def _limits(measure):
    return (0, np.pi / 2) if measure == "procrustes" else (0, 1)


@styled
def training_similarity(report: dict, measure: str = "cka"):
    curve = report["training"]
    fig = new_figure(style.PAGE_WIDTH * 0.7, 2.6)
    ax = fig.subplots()
    for k, (name, values) in enumerate(curve["to_final"][measure].items()):
        ax.plot(
            curve["steps"],
            values,
            color=style.PALETTE[k % len(style.PALETTE)],
            lw=0.9,
            ls="-" if k < len(style.PALETTE) else "--",
            label=short(name),
        )
    ax.set_xlabel("step")
    ax.set_ylabel(f"{LABELS[measure]}\nwith the final geometry")  # two lines: it fits
    low, high = _limits(measure)
    ax.set_ylim(min(low, ax.get_ylim()[0]), high * 1.02)
    # beside the axes, never over the curves
    ax.legend(fontsize=style.MIN_FONT, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return finish(fig, "", "Each activation's geometry over training", fontsize=8)


@styled
def seeds_matrix(report: dict, name: str, measure: str = "cka"):
    m = np.asarray(report["by_activation"][name][measure]["matrix"])
    fig = new_figure(style.COLUMN_WIDTH, style.COLUMN_WIDTH * 0.9)
    ax = fig.subplots()
    seeds = report["seeds"] if len(m) <= 16 else None  # more would overprint
    low, high = _limits(measure)
    image = heatmap(
        ax,
        m,
        seeds,
        seeds,
        cmap_name=style.SEQUENTIAL,
        vmin=min(low, float(m.min())),
        vmax=high,
        annotate=len(m) <= 8,
    )
    if seeds is None:
        ax.xaxis.set_major_locator(MaxNLocator(8, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(8, integer=True))
    ax.set_xlabel("seed")
    ax.set_ylabel("seed")
    colorbar(fig, image, ax, LABELS[measure])
    return finish(fig, "", f"Seeds x seeds: {short(name)}", fontsize=8)


@styled
def data_bars(data: dict):
    names = sorted(data["by_activation"], key=lambda n: -data["by_activation"][n]["correlation"])
    acts = [data["by_activation"][n] for n in names]
    fig = new_figure(style.PAGE_WIDTH * 0.7, 2.8)
    ax = fig.subplots()
    x = np.arange(len(acts))
    values = [a["correlation"] for a in acts]
    err = None
    if all(a["ci"] for a in acts):
        err = np.array([[v - a["ci"][0], a["ci"][1] - v] for v, a in zip(values, acts)]).T
    ax.bar(x, values, yerr=err, color=style.PALETTE[0], error_kw={"lw": 0.6})
    if data["noise_ceiling"]:
        lower, upper = data["noise_ceiling"]
        ax.axhspan(lower, upper, color="#BBBBBB", alpha=0.6, lw=0, label="noise ceiling")
        ax.legend(fontsize=style.MIN_FONT + 1, frameon=False, loc="upper right")
    ax.set_xticks(x, [short(n) for n in names], rotation=90, fontsize=style.MIN_FONT)
    ax.set_ylabel(f"RDM correlation ({data['comparison']})")
    note = f"{data['rdm']} RDMs; bars: 95% bootstrap CI over stimuli" + (
        "" if data["noise_ceiling"] else f"; no ceiling: {data['noise_ceiling_reason']}"
    )
    return finish(fig, note, "Model activations versus the data", fontsize=8)


def write_figures(report: dict, folder: Path) -> list[Path]:
    """Every figure the report supports, as PNG into `folder` (created by the store, never
    through a link); returns the paths."""
    from ..store.write import atomic_write, make_folder

    make_folder(folder, "geometry folder")
    figures = {}
    if "rdms" in report:
        figures["rdms"] = rdm_grid(report)
        figures["activation_cka"] = activation_similarity(report)
    if "training" in report:
        # the first measure asked for keeps the plain name; the others carry theirs
        for k, m in enumerate(report["training"]["measures"]):
            figures["training" if k == 0 else f"training_{m}"] = training_similarity(report, m)
    if "data" in report:
        figures["data"] = data_bars(report["data"])
    if "seeds" in report:
        first = report["measures"][0]  # one figure per activation, for the first measure
        for name in report["activations"]:
            figures[f"seeds_{short(name)}"] = seeds_matrix(report, name, first)
    paths = []
    for stem, fig in figures.items():
        path, buffer = folder / f"{stem}.png", io.BytesIO()
        fig.savefig(buffer, format="png")
        atomic_write(path, buffer.getvalue())
        paths.append(path)
    return paths
