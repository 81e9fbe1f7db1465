"""The circuit a compiled program is known to have, read off its weights: in a compiled model
every residual direction is one named variable's value (no superposition, no normalisation), so
node s feeds receiver r exactly when s writes a direction r reads. The edges are named as
`flatformer circuits` names them, over the same edge graph (`edges.graph.EdgeGraph`)."""

from __future__ import annotations

import numpy as np

from ..edges.graph import EdgeGraph
from ..errors import FlatformerError
from ..model.transformer import Transformer


def _support(w: np.ndarray, axis: int) -> np.ndarray:
    """The residual directions a weight touches: its rows (axis 1 reduced) or columns."""
    w = np.abs(np.asarray(w, dtype=np.float64))
    scale = w.max() if w.size else 0.0
    return (w > 1e-12 * scale).any(axis=axis) if scale > 0 else np.zeros(w.shape[1 - axis], bool)


def known_edges(model: Transformer) -> list[list[str]]:
    """Every edge (sender, receiver) of the model's graph along which a value flows: the
    directions the sender writes (W_E's and W_pos's columns, a head's W_V W_O, an MLP's W_out)
    meet those the receiver reads (a head's W_Q, W_K or W_V rows, an MLP's W_in, W_U)."""
    cfg, t = model.cfg, model.tensors
    if cfg.normalization != "none" or cfg.ln_final:
        raise FlatformerError("a circuit is read off weights only without LayerNorm")
    graph = EdgeGraph(model)
    writes = {"tok": _support(t["embed.W_E"], 0), "pos": _support(t["pos_embed.W_pos"], 0)}
    reads = {"logits": _support(t["unembed.W_U"], 1)}
    for L in range(cfg.n_layers):
        b = f"blocks.{L}."
        for h in range(cfg.n_heads):
            head = f"a{L}.{h}"
            ov = t[b + "attn.W_V"][h] @ t[b + "attn.W_O"][h] if cfg.attn_out else None
            if ov is None:  # no W_O: the head writes z into its own slice of the stream
                ov = np.zeros((cfg.d_model, cfg.d_model))
                ov[:, h * cfg.d_head : (h + 1) * cfg.d_head] = t[b + "attn.W_V"][h]
            writes[head] = _support(ov, 0)
            for kind in "QKV":
                reads[f"{head}.{kind.lower()}"] = _support(t[b + f"attn.W_{kind}"][h], 1)
        if graph.mlp[L]:
            writes[f"m{L}"] = _support(t[b + "mlp.W_out"], 0)
            reads[f"m{L}"] = _support(t[b + "mlp.W_in"], 1)
    return [[s, r] for s, r in graph.edges if (writes[s] & reads[r]).any()]


def live_edges(model: Transformer, wired, batches, chunk: int = 16) -> list[list[str]]:
    """The wired edges that matter: those whose removal (the edge zero-ablated alone) changes a
    logit the program is read at (every position after BOS) on some input of `batches` (token
    arrays (N, 1 + n), one per input length n: a model that attends both ways reads no padding).
    A wired edge can carry nothing the output depends on: the query and key of an always-true
    selector (the pattern is uniform either way), or the `bos` direction into an MLP, whose
    units it switches off at BOS alone. Conmy et al. 2023 (ACDC, Table 3) take as the compiled
    programs' circuits the edges whose zero ablation matters in the same way."""
    graph = EdgeGraph(model)
    ids = [graph.edge_index(s, r) for s, r in wired]
    live = np.zeros(len(ids), bool)
    refs = graph.zero_refs()
    for tokens in batches:
        clean = graph.forward(tokens, refs, np.ones((1, graph.n_edges)))[0][0, :, 1:]
        scale = max(np.abs(clean).max(), 1.0)
        for start in range(0, len(ids), chunk):
            todo = ids[start : start + chunk]
            masks = np.ones((len(todo), graph.n_edges))
            masks[np.arange(len(todo)), todo] = 0.0
            logits = graph.forward(tokens, refs, masks)[0][:, :, 1:]
            moved = np.abs(logits - clean).max(axis=(1, 2, 3)) > 1e-9 * scale
            live[start : start + len(todo)] |= moved
    return [list(e) for e, keep in zip(wired, live) if keep]
