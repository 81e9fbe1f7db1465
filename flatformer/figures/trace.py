"""Figures that trace one sequence through the model (fig11 to fig15), per-sequence attention
matrices and the value arrows of many held-out predictions (supplementary)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import evenly_spaced
from . import compute as C
from . import style
from .context import FigureContext
from .panels import (argmax_image, backdrop, colorbar, field_image, heatmap, new_figure,
                     finish, plane_axes, styled, symmetric)


def seq_keys(ctx: FigureContext) -> list[tuple[str, int]]:
    return [(w, i) for i, w in enumerate(ctx.trace.token_text)]


def seq_colors(ctx: FigureContext) -> list[str]:
    return [ctx.colors[t] for t in ctx.trace.tokens]


def sequence_title(ctx: FigureContext) -> str:
    return f"{ctx.title}; \"{' '.join(ctx.trace.token_text)}\""


def row_names(keys) -> list[str]:
    return [style.point_text(t, i) for t, i in keys]


def dim_cols(n: int) -> list[str]:
    from .geometry import dim_names
    return dim_names(n)


# --------------------------------------------------------------------------- fig11

@dataclass
class TraceEmbeddings:
    keys: list                  # (token, position) per sequence position
    colors: list[str]
    x: np.ndarray               # (T, d)
    p: np.ndarray               # (T, d)
    e: np.ndarray               # (T, d)
    e_2d: np.ndarray            # (T, 2)
    all_2d: np.ndarray          # (V, T, 2) the gray backdrop
    plane: C.Plane
    title: str


def compute_trace_embeddings(ctx: FigureContext) -> TraceEmbeddings:
    tr, emb = ctx.trace, ctx.embeddings
    return TraceEmbeddings(seq_keys(ctx), seq_colors(ctx), tr.embed, tr.pos_embed, tr.e,
                           emb.plane.project(tr.e), emb.combined_2d, emb.plane,
                           f"{ctx.title}; \"{' '.join(tr.token_text)}\"")


@styled
def draw_trace_embeddings(data: TraceEmbeddings, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 4, width_ratios=[0.6, 0.6, 0.6, 2.3])
    names = row_names(data.keys)
    d = data.x.shape[1]
    vmax = symmetric(np.concatenate([data.x, data.p, data.e]))
    for ax, m, title in zip(axes[:3], (data.x, data.p, data.e), ("x (token)", "p (position)",
                                                                 "e = x + p")):
        heatmap(ax, m, rows=names, cols=dim_cols(d), vmin=-vmax, vmax=vmax, annotate=d <= 3,
                fontsize=4.6, title=title)
    ax = axes[3]
    backdrop(ax, data.all_2d)
    ax.plot(*data.e_2d.T, color="#AAAAAA", lw=0.5, zorder=2)
    ax.scatter(*data.e_2d.T, c=data.colors, s=22, edgecolors="white", linewidths=0.5, zorder=3)
    style.queue_labels(ax, data.e_2d, data.keys, data.colors, fontsize=6.5)
    plane_axes(ax, C.square_limits(data.all_2d), data.plane)
    ax.set_title("the sequence's e over all combined embeddings (gray)")
    fig.suptitle(f"Trace, step 1, embeddings: {data.title}", fontsize=8)
    return fig


# --------------------------------------------------------------------------- fig12

@dataclass
class TraceQK:
    keys: list
    colors: list[str]
    q: np.ndarray               # (T, dh) head shown
    k: np.ndarray
    q_2d: np.ndarray            # (T, 2) in the joint Q/K plane
    k_2d: np.ndarray
    all_q: np.ndarray           # (V, T, 2)
    all_k: np.ndarray
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_trace_qk(ctx: FigureContext, head: int = 0) -> TraceQK:
    """The sequence's queries and keys at block 0 (from its cache), in the joint Q/K plane of
    all points."""
    block, proj = ctx.trace.blocks[0], ctx.projections
    plane = proj.qk_plane(head)
    all_q, all_k = plane.project(proj.q[:, :, head]), plane.project(proj.k[:, :, head])
    return TraceQK(seq_keys(ctx), seq_colors(ctx), block.q[:, head], block.k[:, head],
                   plane.project(block.q[:, head]), plane.project(block.k[:, head]), all_q,
                   all_k, plane, C.square_limits(all_q, all_k), ctx.block_note(),
                   sequence_title(ctx))


@styled
def draw_trace_qk(data: TraceQK, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 3, width_ratios=[0.6, 0.6, 2.3])
    names = row_names(data.keys)
    dh = data.q.shape[1]
    vmax = symmetric(np.concatenate([data.q, data.k]))
    for ax, m, title, color in ((axes[0], data.q, "queries q", style.QUERY_COLOR),
                                (axes[1], data.k, "keys k", style.KEY_COLOR)):
        heatmap(ax, m, rows=names, cols=dim_cols(dh), vmin=-vmax, vmax=vmax,
                annotate=dh <= 3, fontsize=4.6)
        ax.set_title(title, color=color)
    ax = axes[2]
    backdrop(ax, data.all_q)
    backdrop(ax, data.all_k)
    ax.scatter(*data.q_2d.T, c=data.colors, s=22, edgecolors=style.QUERY_COLOR,
               linewidths=0.8, zorder=3, label="query (blue edge)")
    ax.scatter(*data.k_2d.T, c=data.colors, s=26, marker="^", edgecolors=style.KEY_COLOR,
               linewidths=0.8, zorder=3, label="key (red edge)")
    keys = [("q " + t, i) for t, i in data.keys] + [("k " + t, i) for t, i in data.keys]
    style.queue_labels(ax, np.concatenate([data.q_2d, data.k_2d]), keys, data.colors * 2,
                       fontsize=6)
    plane_axes(ax, data.limits, data.plane, "Q/K")
    ax.legend(loc="lower left", frameon=False, handletextpad=0.2)
    ax.set_title("the sequence's queries and keys over all points (gray)")
    return finish(fig, data.note, f"Trace, step 2, queries and keys: {data.title}", fontsize=8)


# --------------------------------------------------------------------------- fig13

@dataclass
class TraceAttention:
    keys: list
    colors: list[str]
    k_2d: np.ndarray            # (T, 2)
    q_2d: np.ndarray            # (T, 2)
    fields: list                # per query position: Field of q_i . k / sqrt(dh)
    scores: np.ndarray          # (T, T) with NaN where masked
    pattern: np.ndarray         # (T, T)
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_trace_attention(ctx: FigureContext, head: int = 0,
                            resolution: int = 80) -> TraceAttention:
    """For every query of the sequence, its dot product over the key plane (with the sequence's
    keys on it), then the masked scores and the attention pattern read from the cache."""
    qk = compute_trace_qk(ctx, head)
    block = ctx.trace.blocks[0]
    fields = [C.qk_field(q, qk.plane, qk.limits, resolution) for q in block.q[:, head]]
    scores = np.where(np.isfinite(block.scores[head]), block.scores[head], np.nan)
    notes = [qk.note] + ([] if qk.plane.is_identity else [C.SLICE_NOTE])
    return TraceAttention(qk.keys, qk.colors, qk.k_2d, qk.q_2d, fields, scores,
                          block.pattern[head], qk.plane, qk.limits,
                          "; ".join(n for n in notes if n), qk.title)


@styled
def draw_trace_attention(data: TraceAttention, fig=None):
    T = len(data.keys)
    ncols = min(T, 4)
    nrows = -(-T // ncols)
    fig = new_figure(style.PAGE_WIDTH, 1.75 * nrows + 2.9, fig)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.75 * nrows, 2.9])
    axes = np.atleast_1d(top.subplots(nrows, ncols)).ravel()
    vmax = max(symmetric(f.values) for f in data.fields)
    for i, ax in enumerate(axes):
        if i >= T:
            ax.axis("off")
            continue
        image = field_image(ax, data.fields[i], vmax=vmax, alpha=0.85)
        visible = np.arange(T) <= i
        ax.scatter(*data.k_2d[~visible].T, marker="^", s=12, facecolors="none",
                   edgecolors=style.MASKED_COLOR, linewidths=0.6, zorder=2)
        colors = [c for c, v in zip(data.colors, visible) if v]
        ax.scatter(*data.k_2d[visible].T, marker="^", s=16, c=colors, edgecolors="white",
                   linewidths=0.4, zorder=3)
        style.queue_labels(ax, data.k_2d[visible], [k for k, v in zip(data.keys, visible) if v],
                           colors, fontsize=5)
        ax.scatter(*data.q_2d[i], marker="*", s=50, c=data.colors[i], edgecolors="white",
                   linewidths=0.5, zorder=4)
        plane_axes(ax, data.limits, ticks=False)
        ax.set_title(f"query {style.point_text(*data.keys[i])}", fontsize=6.5, pad=2)
    colorbar(top, image, list(axes), "q · k / √d_head", shrink=0.8)
    ax_s, ax_p = bottom.subplots(1, 2)
    names = row_names(data.keys)
    small = T <= 10
    image = heatmap(ax_s, data.scores, rows=names, cols=names, annotate=small, fmt="{:.1f}",
                    fontsize=4.3, title="scores q · k / √d_head (gray: masked)")
    colorbar(bottom, image, ax_s)
    image = heatmap(ax_p, data.pattern, rows=names, cols=names, cmap_name=style.WEIGHTS,
                    vmin=0, vmax=1, annotate=small, fmt="{:.2f}", fontsize=4.3,
                    title="attention pattern (softmax of each row)")
    colorbar(bottom, image, ax_p)
    for ax in (ax_s, ax_p):
        ax.set_xlabel("key", labelpad=1)
        ax.set_ylabel("query", labelpad=1)
        ax.tick_params(axis="x", labelrotation=90)
    return finish(fig, data.note,
                  f"Trace, step 3, attention (keys after the query hidden, gray): {data.title}",
                  fontsize=8)


# --------------------------------------------------------------------------- fig14

@dataclass
class TraceValues:
    keys: list
    colors: list[str]
    v: np.ndarray               # (T, dh) head shown
    z: np.ndarray               # (T, dh) = pattern @ v
    attn_out: np.ndarray        # (T, d) all heads, into the residual stream
    v_2d: np.ndarray            # (T, 2) in the value plane
    z_2d: np.ndarray
    all_v: np.ndarray           # (V, T, 2)
    plane: C.Plane
    note: str
    title: str


def compute_trace_values(ctx: FigureContext, head: int = 0) -> TraceValues:
    block, proj = ctx.trace.blocks[0], ctx.projections
    plane = proj.plane("v", head)
    return TraceValues(seq_keys(ctx), seq_colors(ctx), block.v[:, head], block.z[:, head],
                       block.attn_out, plane.project(block.v[:, head]),
                       plane.project(block.z[:, head]), plane.project(proj.v[:, :, head]),
                       plane, ctx.block_note(), sequence_title(ctx))


@styled
def draw_trace_values(data: TraceValues, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 3.3, fig)
    axes = fig.subplots(1, 4, width_ratios=[0.6, 0.6, 0.6, 2.2])
    names = row_names(data.keys)
    vmax = symmetric(np.concatenate([data.v, data.z]))
    heatmap(axes[0], data.v, rows=names, cols=dim_cols(data.v.shape[1]), vmin=-vmax,
            vmax=vmax, annotate=data.v.shape[1] <= 3, fontsize=4.6, title="values v")
    heatmap(axes[1], data.z, rows=names, cols=dim_cols(data.z.shape[1]), vmin=-vmax,
            vmax=vmax, annotate=data.z.shape[1] <= 3, fontsize=4.6, title="A v")
    heatmap(axes[2], data.attn_out, rows=names, cols=dim_cols(data.attn_out.shape[1]),
            annotate=data.attn_out.shape[1] <= 3, fontsize=4.6, title="Attn(e)")
    ax = axes[3]
    backdrop(ax, data.all_v)
    ax.scatter(*data.v_2d.T, s=20, facecolors="none", linewidths=0.9,
               edgecolors=data.colors, zorder=3, label="value v_j (open)")
    ax.scatter(*data.z_2d.T, c=data.colors, s=22, edgecolors="black", linewidths=0.5,
               zorder=4, label="A v at query i (filled)")
    for start, end in zip(data.v_2d, data.z_2d):
        ax.annotate("", end, start, arrowprops=dict(arrowstyle="->", color="#999999", lw=0.5,
                                                    shrinkA=2, shrinkB=2), zorder=2)
    keys = [("v " + t, i) for t, i in data.keys] + [("Av " + t, i) for t, i in data.keys]
    style.queue_labels(ax, np.concatenate([data.v_2d, data.z_2d]), keys, data.colors * 2,
                       fontsize=5.5)
    plane_axes(ax, C.square_limits(data.all_v, data.z_2d), data.plane, "value")
    ax.legend(loc="lower left", frameon=False, handletextpad=0.2, fontsize=5.5)
    ax.set_title("values and their weighted sums (arrow: v_i to A v at i)")
    return finish(fig, data.note,
                  f"Trace, step 4, values and attention output: {data.title}", fontsize=8)


# --------------------------------------------------------------------------- fig15

@dataclass
class TraceNudge:
    vocab: list[str]
    colors: list[str]
    keys: list
    land: C.Landscape
    plane: C.Plane
    limits: tuple
    start: np.ndarray           # (T, 2) e (the last block's input)
    end: np.ndarray             # (T, 2) z = e + Attn(e)
    focus_positions: np.ndarray  # positions holding the focus token
    allowed: np.ndarray         # (T, V) tokens the rule allows next
    decided: np.ndarray         # (T,) whether the rule constrains the next token at all
    landed: np.ndarray          # (T,) argmax of the output network at z (the model's guess)
    start_name: str             # "e", or the last block's input in a deeper model
    note: str
    title: str


def compute_trace_nudge(ctx: FigureContext) -> TraceNudge:
    """Where each position starts (e) and ends (z = e + Attn(e)) on the output landscape, the
    zone it lands in, and what the rule allows next."""
    land = ctx.landscape                            # raises NotInPlane unless d_model == 2
    last = ctx.trace.blocks[-1]
    plane = ctx.embeddings.plane
    landed = C.output_logits(ctx.model, last.resid_mid).argmax(-1)
    focus = np.flatnonzero(ctx.trace.tokens == ctx.focus)
    from .landscape import landscape_note
    return TraceNudge(ctx.vocab, ctx.colors, seq_keys(ctx), land, plane, ctx.limits,
                      plane.project(last.resid_pre), plane.project(last.resid_mid), focus,
                      *C.next_allowed(ctx.task, ctx.trace.tokens), landed,
                      "e" if ctx.cfg.n_layers == 1 else f"block {ctx.cfg.n_layers - 1}'s input",
                      landscape_note(ctx),
                      sequence_title(ctx))


@styled
def draw_trace_nudge(data: TraceNudge, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 5.2, fig)
    ax, ax_text = fig.subplots(1, 2, width_ratios=[3, 1])
    argmax_image(ax, data.land, data.colors, alpha=0.45, vocab=data.vocab)
    T = len(data.keys)
    focus = set(data.focus_positions.tolist())
    for i in range(T):
        bold = i in focus
        ax.annotate("", data.end[i], data.start[i], zorder=4 if bold else 3,
                    arrowprops=dict(arrowstyle="-|>", mutation_scale=8 if bold else 5,
                                    color="black" if bold else "#777777",
                                    lw=1.3 if bold else 0.5, shrinkA=2, shrinkB=1))
    colors = [data.colors[data.vocab.index(t)] for t, _ in data.keys]
    ax.scatter(*data.start.T, c=colors, s=16, edgecolors="white", linewidths=0.5, zorder=5)
    ax.scatter(*data.end.T, c=colors, s=24, marker="D", edgecolors="black", linewidths=0.6,
               zorder=5)
    first = "e " if data.start_name == "e" else ""
    keys = [(first + t, i) for t, i in data.keys] + [("z " + t, i) for t, i in data.keys]
    style.queue_labels(ax, np.concatenate([data.start, data.end]), keys, colors * 2,
                       fontsize=5.5)
    plane_axes(ax, data.limits, data.plane)
    ax.set_title(f"{data.start_name} (dot) moved by attention to z = {data.start_name} + Attn "
                 f"(diamond), over the argmax map", fontsize=7)
    lines = ["position: z lands in", "(what the rule allows)", ""]
    for i in range(T):
        name = style.point_text(*data.keys[i])
        got = data.vocab[data.landed[i]]
        if data.decided[i]:
            allowed = [data.vocab[t] for t in np.flatnonzero(data.allowed[i])]
            want = " ".join(allowed[:4]) + (" ..." if len(allowed) > 4 else "")
            mark = "✓" if data.allowed[i, data.landed[i]] else "✗"
            word = "target" if len(allowed) == 1 else "allowed"
            lines.append(f"{name}: {got}  ({word} {want}) {mark}")
        else:
            lines.append(f"{name}: {got}")
    ax_text.axis("off")
    ax_text.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", fontsize=6.5,
                 transform=ax_text.transAxes, linespacing=1.5)
    return finish(fig, data.note,
                  f"Trace, step 5, the nudge (bold: the focus token): {data.title}", fontsize=8)


# --------------------------------------------------------------------------- supplementary

@dataclass
class AttentionMatrices:
    vocab: list[str]
    rows: list                  # per sequence: (keys, pattern (T,T), lm_in (T,d), logits, probs)
    note: str
    title: str


def example_sequences(ctx: FigureContext, n: int = 2) -> list[np.ndarray]:
    """Full-context held-out windows whose last position is one the rule constrains (the model's
    hardest kind of prediction), distinct from each other."""
    inputs, index = ctx.rule_windows[:2]
    picked, seen = [], set()
    for window, i in zip(inputs, index):
        if i == len(window) - 1 and tuple(window) not in seen:
            picked.append(window)
            seen.add(tuple(window))
            if len(picked) == n:
                break
    return picked


def compute_attention_matrices(ctx: FigureContext, head: int = 0) -> AttentionMatrices:
    """For the traced sequence and two held-out windows: block 0's attention pattern, the
    LM head's input (the last residual), the logits and the probabilities."""
    rows = []
    for tokens in [ctx.sequence] + example_sequences(ctx):
        tr = C.trace(ctx.model, tokens, ctx.vocab)
        keys = [(w, i) for i, w in enumerate(tr.token_text)]
        rows.append((keys, tr.blocks[0].pattern[head], tr.blocks[-1].resid_post, tr.logits,
                     tr.probs))
    return AttentionMatrices(ctx.vocab, rows, ctx.block_note(), ctx.title)


@styled
def draw_attention_matrices(data: AttentionMatrices, fig=None):
    n = len(data.rows)
    fig = new_figure(style.PAGE_WIDTH, 2.35 * n + 0.3, fig)
    T = max(len(r[0]) for r in data.rows)
    d, V = data.rows[0][2].shape[1], len(data.vocab)
    axes = np.atleast_2d(fig.subplots(n, 4, width_ratios=[T, max(d, 2) * 1.3, V, V]))
    for row, (keys, pattern, lm_in, logits, probs) in zip(axes, data.rows):
        names = row_names(keys)
        heatmap(row[0], pattern, rows=names, cols=names, cmap_name=style.WEIGHTS, vmin=0,
                vmax=1, annotate=T <= 10, fmt="{:.1f}", title="attention pattern")
        row[0].tick_params(axis="x", labelrotation=90)
        heatmap(row[1], lm_in, rows=names, cols=dim_cols(d), annotate=d <= 3,
                fmt="{:.1f}", title="LM-head input")
        heatmap(row[2], logits, rows=names, cols=data.vocab, annotate=False, title="logits")
        heatmap(row[3], probs, rows=names, cols=data.vocab, cmap_name=style.SEQUENTIAL, vmin=0,
                vmax=1, annotate=False, title="probabilities")
        for ax in row[2:]:
            ax.tick_params(axis="x", labelsize=5 if V <= 16 else 3.5, labelrotation=90)
            ax.set_yticks([])
        for ax in row[1:2]:
            ax.set_yticks([])
    return finish(fig, data.note,
                  f"Attention and read-out for three sequences (rows: positions): {data.title}",
                  fontsize=8)


@dataclass
class ValueArrows:
    vocab: list[str]
    colors: list[str]
    start: np.ndarray           # (R, 2) e at the predicting position
    moved: np.ndarray           # (R, 2) Attn(e) there
    end: np.ndarray             # (R, 2) z = e + Attn(e)
    targets: np.ndarray         # (R,) the rule's forced target, -1 where several are allowed
    correct: np.ndarray         # (R,) bool: the model's top prediction is allowed
    land: C.Landscape | None
    plane: C.Plane
    limits: tuple
    note: str
    title: str


def compute_value_arrows(ctx: FigureContext, n: int = 160) -> ValueArrows:
    """At `n` held-out predictions the rule constrains (evenly spaced over the held-out set):
    the residual before the last block's attention, what attention adds, the sum, and whether
    the model's guess is right."""
    keep = evenly_spaced(len(ctx.rule_windows[0]), n)
    inputs, index, targets, allowed = (a[keep] for a in ctx.rule_windows)
    logits, cache = ctx.model.run_with_cache(inputs)
    b = f"blocks.{ctx.cfg.n_layers - 1}."
    rows = np.arange(len(inputs))
    e = cache[b + "hook_resid_pre"][rows, index]
    moved = cache[b + "hook_attn_out"][rows, index]
    z = cache[b + ("hook_resid_post" if ctx.cfg.attn_only else "hook_resid_mid")][rows, index]
    correct = allowed[rows, logits[rows, index].argmax(-1)]
    if ctx.cfg.d_model == 2:
        plane = ctx.embeddings.plane
        limits = C.square_limits(plane.project(e), plane.project(z))
        land = C.landscape(ctx.model, limits, ctx.resolution)   # its own grid: these limits
    else:
        plane, land = C.fit_plane(np.concatenate([e, z])), None
        limits = C.square_limits(plane.project(e), plane.project(z))
    from .landscape import landscape_note
    return ValueArrows(ctx.vocab, ctx.colors, plane.project(e),
                       moved @ plane.axes.T,          # a displacement: no centring
                       plane.project(z), targets, correct, land, plane, limits,
                       landscape_note(ctx), ctx.title)


@styled
def draw_value_arrows(data: ValueArrows, fig=None):
    fig = new_figure(style.PAGE_WIDTH, 2.75, fig)
    axes = fig.subplots(1, 3)
    colors = [data.colors[t] if t >= 0 else style.MASKED_COLOR for t in data.targets]
    ax = axes[0]
    ax.scatter(*data.start.T, c=colors, s=8, edgecolors="none", zorder=3)
    ax.set_title(f"(a) original: e at the prediction\n{len(data.start)} predictions, "
                 f"{int((~data.correct).sum())} wrong")
    ax = axes[1]
    origin = np.zeros_like(data.moved)
    ax.quiver(*origin.T, *data.moved.T, color=colors, angles="xy", scale_units="xy", scale=1,
              width=0.004, alpha=0.7, zorder=3)
    ax.set_title("(b) transformed: Attn(e) from 0")
    ax = axes[2]
    if data.land is not None:
        argmax_image(ax, data.land, data.colors, alpha=0.3, vocab=data.vocab)
    ax.quiver(*data.start.T, *(data.end - data.start).T, color=colors, angles="xy",
              scale_units="xy", scale=1, width=0.003, alpha=0.5, zorder=3)
    ok = data.correct
    ax.scatter(*data.end[ok].T, s=10, c=style.CORRECT_COLOR, marker="o", edgecolors="white",
               linewidths=0.3, zorder=4)
    ax.scatter(*data.end[~ok].T, s=18, c=style.WRONG_COLOR, marker="x", linewidths=0.9,
               zorder=5)
    ax.set_title(f"(c) z = e + Attn(e)\nright ● {ok.sum()}, wrong ✗ {(~ok).sum()}")
    moved_limits = C.square_limits(origin, data.moved)
    start_limits = C.fitted_limits(data.start)
    for a, lim in zip(axes, (start_limits, moved_limits, data.limits)):
        plane_axes(a, lim, data.plane)
    return finish(fig, data.note,
                  f"Value arrows at {len(data.targets)} held-out constrained predictions "
                  f"(colour: the rule's target): {data.title}", fontsize=8)
