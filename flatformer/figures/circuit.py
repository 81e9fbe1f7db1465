"""The circuit figure: the model's edge graph, layers left to right, each edge as wide as its
exact effect (mean ablation, the task's default metric), the circuit's edges in colour."""

from __future__ import annotations

from dataclasses import dataclass


from . import compute as C
from . import style
from .context import FigureContext
from .panels import new_figure, styled

RECEIVER_COLORS = {"q": style.QUERY_COLOR, "k": style.KEY_COLOR, "v": style.VALUE_COLOR}
OTHER_COLOR = style.PALETTE[3]  # edges into an MLP or the logits
OFF_COLOR = "#C8C8C8"


@dataclass
class CircuitGraph:
    nodes: list[str]
    n_layers: int
    edges: list[dict]  # {"src", "dst", "exact", "in_circuit"}
    faithfulness: float | None
    kept: int
    total: int
    metric: str
    ablation: str
    title: str


# Past this many parameters the circuit's search (every edge ablated alone over 200 held-out
# prompts) takes minutes and gigabytes (a 155k-parameter import: over 10 minutes, 7 GB), more
# than the rest of the suite: the figure is left to `flatformer circuits`, whose flags narrow it.
CIRCUIT_PARAMS = 100_000


def compute_circuit(ctx: FigureContext) -> CircuitGraph:
    from ..edges.methods import shown_circuit

    run = ctx.run
    if run.cfg.n_params > CIRCUIT_PARAMS:
        raise C.NotDrawn(
            f"a model of {run.cfg.n_params:,} parameters (over {CIRCUIT_PARAMS:,}) gets its "
            f"circuit from `flatformer circuits {run.path} --prompts 50`"
        )
    report = shown_circuit(ctx.model, run.task, run.data())
    c = report["circuit"]
    return CircuitGraph(
        report["nodes"],
        run.cfg.n_layers,
        report["edges"],
        c["faithfulness"],
        c["edges_kept"],
        c["edges_total"],
        report["metric"],
        report["ablation"],
        ctx.title,
    )


def layout(nodes: list[str], n_layers: int) -> dict[str, tuple[float, float]]:
    """Box centres: embeddings in column 0, layer L's heads in column 1 + 2L and its MLP in
    2 + 2L, the logits last; boxes of a column spread evenly around y = 0."""
    columns: dict[float, list[str]] = {}
    for node in nodes:
        if node in ("tok", "pos"):
            x = 0
        elif node == "logits":
            x = 1 + 2 * n_layers
        else:
            layer = int(node[1:].split(".")[0])
            x = 1 + 2 * layer + (1 if node.startswith("m") else 0)
        columns.setdefault(x, []).append(node)
    where = {}
    for x, members in columns.items():
        for i, node in enumerate(members):
            where[node] = (float(x), (len(members) - 1) / 2 - i)
    return where


@styled
def draw_circuit(graph: CircuitGraph, fig=None):
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path

    fig = new_figure(style.PAGE_WIDTH, 2.8, fig)
    ax = fig.subplots()
    where = layout(graph.nodes, graph.n_layers)
    w, h = 0.5, 0.36
    largest = max((abs(e["exact"]) for e in graph.edges), default=0.0) or 1.0
    ports = {"q": 0.12, "k": 0.0, "v": -0.12}
    # faint edges first, the circuit's on top
    for e in sorted(graph.edges, key=lambda e: (e["in_circuit"], abs(e["exact"]))):
        kind = e["dst"].rsplit(".", 1)[1] if e["dst"].count(".") == 2 else None
        node = e["dst"][:-2] if kind else e["dst"]
        (x0, y0), (x1, y1) = where[e["src"]], where[node]
        start = (x0 + w / 2, y0)
        end = (x1 - w / 2, y1 + (ports[kind] if kind else 0.0))
        color = RECEIVER_COLORS.get(kind, OTHER_COLOR) if e["in_circuit"] else OFF_COLOR
        width = 0.3 + 4.0 * abs(e["exact"]) / largest
        style_kw = dict(
            arrowstyle="-", lw=width, color=color, alpha=0.95 if e["in_circuit"] else 0.7, zorder=1
        )
        if abs(x1 - x0) <= 1:
            ax.add_patch(FancyArrowPatch(start, end, **style_kw))
            continue
        # An edge skipping a column passes over (or under) every box of the columns between its
        # ends: it rises before the first of them, runs level above the tallest, and comes
        # down after the last (one curve from end to end dips back between the last columns
        # and the destination, through the box before it); the longer its skip, the higher
        # its lane, so edges sharing a stretch stay apart.
        between = [(x, y) for x, y in where.values() if x0 < x < x1]
        ys = [y for _, y in between]
        clear = h / 2 + 0.3 + min(0.08 * (len({x for x, _ in between}) - 1), 0.4)
        over = max(ys) + clear if y0 >= 0 else min(ys) - clear
        rise = min(x for x, _ in between) - w / 2 - 0.1
        fall = max(x for x, _ in between) + w / 2 + 0.1
        vertices = [
            start,
            ((start[0] + rise) / 2, over),
            (rise, over),
            (fall, over),
            ((fall + end[0]) / 2, over),
            end,
        ]
        codes = [Path.MOVETO, Path.CURVE3, Path.CURVE3, Path.LINETO, Path.CURVE3, Path.CURVE3]
        ax.add_patch(FancyArrowPatch(path=Path(vertices, codes), **style_kw))
    for node, (x, y) in where.items():
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2),
                w,
                h,
                boxstyle="round,pad=0.02,rounding_size=0.05",
                fc="white",
                ec="#333333",
                lw=0.7,
                zorder=2,
            )
        )
        ax.text(x, y, node, ha="center", va="center", fontsize=7, zorder=3)
        if node.startswith("a"):
            for kind, dy in ports.items():
                ax.text(
                    x - w / 2 + 0.03,
                    y + dy,
                    kind,
                    ha="left",
                    va="center",
                    fontsize=style.MIN_FONT,
                    color=RECEIVER_COLORS[kind],
                    zorder=3,
                )
    xs = [p[0] for p in where.values()]
    ys = [p[1] for p in where.values()]
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_ylim(min(ys) - 0.75, max(ys) + 0.75)  # room for the arcs over and under
    ax.set_axis_off()
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=RECEIVER_COLORS[k], lw=2, label=f"circuit edge into {k}")
        for k in "qkv"
    ]
    handles += [
        Line2D([], [], color=OTHER_COLOR, lw=2, label="circuit edge into MLP / logits"),
        Line2D([], [], color=OFF_COLOR, lw=2, label="not in the circuit"),
    ]
    ax.legend(
        handles=handles,
        loc="lower center",
        ncol=5,
        frameon=False,
        fontsize=5.5,
        bbox_to_anchor=(0.5, -0.12),
    )
    faith = "-" if graph.faithfulness is None else f"{graph.faithfulness:.3f}"
    ax.set_title(
        f"{graph.kept} of {graph.total} edges keep {faith} of the {graph.metric} "
        f"({graph.ablation} ablation); width = |exact effect| of the edge alone",
        loc="left",
    )
    fig.suptitle(f"Circuit: {graph.title}", fontsize=8)
    return fig
