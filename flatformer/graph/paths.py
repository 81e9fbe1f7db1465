"""The factors of every link of a graph file: what the graph page needs to recompute each
weight from the weights, not read it.

In the replacement model of a prompt (replacement.py) every path from a source node to a target
is linear: the source writes `activation x write` into the residual stream at its position
(write: a feature's decoder row W_dec[i], an error node's vector, a token's or a position's
embedding row, each with activation 1 but the feature's); each later block's attention carries
it, with its pattern and LayerNorm scales frozen at their values on the prompt, from a key
position to a query position (head h: the LayerNorm's linear part, (x - mean x) / scale * w,
or RMSNorm's x / scale * w, then W_V[h] (its group's), then W_O[h], or the head's own d_head
slice without W_O); MLPs carry nothing (the
features are fixed); the target reads its input through its LayerNorm's linear part and its
`read` vector (a feature's encoder column W_enc[:, i], a logit's unembedding column minus the
mean column). So

    weight(s -> t) = activation_s x read_t . LN_t(P (write_s)),

P the sum over paths of the frozen residual and attention maps from the block after the
source's to the target's. Biases never enter (an edge is the target's input with the source on
minus with every source off). The page's JavaScript (explorer/graph-model.js) computes this
from the `frozen` table `frozen_factors` writes, and the page checks every link against the
weight attribute() computed.
"""

from __future__ import annotations

import numpy as np

from ..config import attn_weight
from ..engine.components import repeat_kv


def _param(model, name: str) -> np.ndarray:
    return np.asarray(model.tensors[name], dtype=np.float64).reshape(model.cfg.param_shapes()[name])


def _ln(rep, name: str):
    """A LayerNorm's frozen linear part: its gain and the prompt's scale at each position."""
    if name not in rep.scales:
        return None
    return {
        "w": _param(rep.model, name + ".w").tolist(),
        "scale": np.asarray(rep.scales[name]).reshape(rep.T).tolist(),
        "rms": rep.cfg.norm_kind == "rms",  # x / scale * w: no centring
    }


def frozen_factors(graph, node_ids: list[str], kept: list[int]) -> dict:
    """The `frozen` table of a graph file: per block the frozen patterns, LayerNorms and value
    and output weights; per kept node (`kept`, indices into `node_ids`, the graph's node order)
    its activation, where it writes or reads (block, position) and its `write` and `read`
    vectors (see the module's docstring)."""
    rep = graph.extras["replacement"]
    cfg, model = rep.cfg, rep.model
    group = cfg.n_heads // cfg.n_kv_heads
    blocks = []
    for L in range(cfg.n_layers):
        b = f"blocks.{L}."
        blocks.append(
            {
                "pattern": rep.frozen[L].tolist(),  # (H, T, T): query by key
                "ln1": _ln(rep, b + "ln1"),
                # (H, d, dh): a grouped head's is its group's
                "W_V": repeat_kv(_param(model, b + attn_weight(cfg, "V")), group).tolist(),
                "W_O": _param(model, b + "attn.W_O").tolist() if cfg.attn_out else None,
                "ln2": _ln(rep, b + "ln2"),
            }
        )
    W_E = _param(model, "embed.W_E")
    if cfg.positional_embedding_type == "standard":
        W_pos = _param(model, "pos_embed.W_pos")
    else:  # rotary and shortformer positions write nothing into the stream
        W_pos = np.zeros((cfg.n_ctx, cfg.d_model))
    W_U = _param(model, "unembed.W_U")
    by_layer = {L: tc for L, tc in rep.transcoders.items()}
    nodes = {}
    n_f, n_e, T = graph.n_features, graph.n_errors, graph.n_pos
    for i in kept:
        kind = graph.kind(i)
        entry = {"kind": kind, "activation": 1.0}
        if kind == "feature":
            L, p, idx = (int(v) for v in graph.features[i])
            tc = by_layer[L]
            entry.update(
                activation=float(graph.activations[i]),
                layer=L,
                pos=p,
                write=tc.W_dec[idx].tolist(),
                read=tc.W_enc[:, idx].tolist(),
            )
        elif kind == "error":
            e = i - n_f
            entry.update(
                layer=int(graph.error_layers[e // T]),
                pos=e % T,
                write=rep.errors[e // T, e % T].tolist(),
            )
        elif kind in ("token", "position"):
            p = (i - n_f - n_e) % T
            row = W_E[graph.tokens[p]] if kind == "token" else W_pos[p]
            entry.update(layer=-1, pos=p, write=row.tolist())
        else:
            tok = graph.logit_tokens[i - (len(graph.adjacency) - graph.n_logits)]
            entry.update(layer=cfg.n_layers, pos=T - 1, read=(W_U[:, tok] - W_U.mean(1)).tolist())
        nodes[node_ids[i]] = entry
    return {
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "d_head": cfg.d_head,
        "n_pos": T,
        "parallel": cfg.parallel_attn_mlp,  # a feature reads its block's input, not attention's
        "blocks": blocks,
        "ln_final": _ln(rep, "ln_final"),
        "nodes": nodes,
    }
