"""A pruned attribution graph scored against the circuit exhaustive edge ablation finds
(flatformer/edges: every edge between the embeddings `tok` and `pos`, the heads `aL.H` (read as
query, key or value), the MLPs `mL` and the logits ablated alone, then the greedy circuit).

The graph's nodes are features, errors, tokens, positions and logits, not heads; its edges run
through the frozen attention. To put it on the truth's edges, each kept edge of the graph is
split by the heads it passes through: the graph with no head (the residual stream alone, D),
with one head h (D plus the paths through h alone), and with two heads of different blocks
(adding the paths through both, V-composition). Then, summing |weight| over the graph's kept
edges (pruned as in the paper):

- `S -> R` (no head): the direct part D of edges from S's nodes to R's nodes;
- `S -> aL.h.v` and `aL.h -> R`: the part through h of edges from S's nodes, or into R's;
- `aL.h -> aM.g.v`: the part through both;
- `S -> aL.h.q` and `S -> aL.h.k`: nothing in the graph (attention is frozen); with the QK
  attributions, the size of the terms of h's scores whose query-side (key-side) node is S's,
  weighted by the attention paid, over the cells the kept edges pass through; for a sender
  head `aM.g`, the terms of the part of the query (key) that g's output carries there.

S's nodes: `tok` the token embeddings, `pos` the position embeddings, `mL` block L's features
and error nodes; R's: `mL` block L's features, `logits` the logit nodes.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..edges.methods import roc_auc
from .attribution import attribute
from .files import qk_hooks
from .prune import prune
from .qk import cells, qk_terms


def node_groups(graph) -> tuple[list[str], list[str]]:
    """Each node's group as a sender (`tok`, `pos`, `mL`; "" for logits) and as a receiver
    (`mL`, `logits`; "" for the rest)."""
    send, receive = [], []
    for i in range(len(graph.adjacency)):
        kind = graph.kind(i)
        if kind == "feature":
            g = f"m{graph.features[i, 0]}"
            send.append(g)
            receive.append(g)
        elif kind == "error":
            send.append(f"m{graph.error_layers[(i - graph.n_features) // graph.n_pos]}")
            receive.append("")
        elif kind in ("token", "position"):
            send.append("tok" if kind == "token" else "pos")
            receive.append("")
        else:
            send.append("")
            receive.append("logits")
    return send, receive


def head_paths(model, transcoders, tokens):
    """The adjacency split by the heads its paths pass through: D (no head), {head: through it
    alone}, {(head of block L, head of block M > L): through both}. In a model of at most two
    blocks these sum to the graph's adjacency."""
    cfg = model.cfg
    all_heads = [(L, h) for L in range(cfg.n_layers) for h in range(cfg.n_heads)]

    def adj(heads):
        return attribute(model, transcoders, tokens, heads=set(heads)).adjacency

    D = adj(())
    single = {hd: adj([hd]) - D for hd in all_heads}
    pairs = {
        (a, b): adj([a, b]) - D - single[a] - single[b]
        for a, b in itertools.combinations(all_heads, 2)
        if a[0] < b[0]
    }
    return D, single, pairs


def edge_scores(model, transcoders, tokens, edges, node_threshold=0.8, edge_threshold=0.98):
    """The graph's score of each truth edge (sender, receiver) on one prompt, without and with
    the QK attributions: two arrays (n_edges,)."""
    full = attribute(model, transcoders, tokens, keep=qk_hooks(model.cfg))
    pruned = prune(full, node_threshold, edge_threshold)
    kept = pruned.edge_mask
    D, single, pairs = head_paths(model, transcoders, tokens)
    send, receive = node_groups(full)
    send, receive = np.array(send), np.array(receive)
    t_idx, s_idx = np.nonzero(kept)

    def part(matrix, s_group=None, r_group=None):
        sel = np.ones(len(t_idx), bool)
        if s_group is not None:
            sel &= send[s_idx] == s_group
        if r_group is not None:
            sel &= receive[t_idx] == r_group
        return float(np.abs(matrix[t_idx[sel], s_idx[sel]]).sum())

    qk = qk_scores(full, pruned, via_heads(model, transcoders, tokens))
    plain, with_qk = np.zeros(len(edges)), np.zeros(len(edges))
    for e, (src, dst) in enumerate(edges):
        head = parse_head(src)
        if dst.endswith((".q", ".k")):
            with_qk[e] = qk.get((src, dst), 0.0)
            continue
        if dst.endswith(".v"):
            target = parse_head(dst[:-2])
            if head is None:
                value = part(single[target], s_group=src)
                value += sum(part(m, s_group=src) for (a, b), m in pairs.items() if a == target)
            else:
                value = part(pairs.get((head, target), np.zeros_like(D)))
        elif head is not None:
            value = part(single[head], r_group=dst)
            value += sum(part(m, r_group=dst) for (a, b), m in pairs.items() if b == head)
        else:
            value = part(D, s_group=src, r_group=dst)
        plain[e] = with_qk[e] = value
    return plain, with_qk


def parse_head(name: str):
    """(layer, head) of `aL.H`, None for anything else."""
    if not name.startswith("a") or "." not in name:
        return None
    layer, head = name[1:].split(".")[:2]
    return int(layer), int(head)


def qk_scores(graph, pruned, via=None) -> dict:
    """(sender, `aL.H.q` or `.k`) -> the sum over the kept edges' cells of the attention paid
    times the size of the score's terms with the sender on that side: a group of source nodes
    (`tok`, `pos`, `mL`) directly, or an earlier head `aM.G` whose output carries the query or
    key (`via`: {(M, G): (its part of each query and key contribution, of the all-off query and
    key)}, from graphs with that head alone minus graphs with none)."""
    send, _ = node_groups(graph)
    n_s = graph.extras["replacement"].n_sources
    groups = np.array(send[:n_s] + ["bias"])
    rep = graph.extras["replacement"]
    cfg = rep.cfg
    out: dict = {}

    def add(key, value):
        out[key] = out.get(key, 0.0) + float(value)

    for L, h, q, k in cells(graph, pruned):
        weight = rep.patterns[L][h, q, k]
        terms = np.abs(qk_terms(graph, L, h, q, k)) * weight
        for side, sums in (("q", terms.sum(1)), ("k", terms.sum(0))):
            for g in set(groups) - {"bias", ""}:
                add((g, f"a{L}.{h}.{side}"), sums[groups == g].sum())
        Q, K = qk_sides(cfg, graph.extras["contributions"], graph.extras["baseline"], L, h, q, k)
        for (M, G), (parts, base) in (via or {}).items():
            if M >= L:
                continue
            Qg, Kg = qk_sides(cfg, parts, base, L, h, q, k)
            scale = weight / np.sqrt(Q.shape[-1])
            add((f"a{M}.{G}", f"a{L}.{h}.q"), np.abs(Qg @ K.T).sum() * scale)
            add((f"a{M}.{G}", f"a{L}.{h}.k"), np.abs(Q @ Kg.T).sum() * scale)
    return out


def qk_sides(cfg, contributions, baseline, L, h, q, k):
    """Each source's query at q and key at k, the all-off ones last (n_s + 1, dh) each."""
    from .qk import qk_hooks

    q_name, k_name = qk_hooks(cfg, L)
    kv = h // (cfg.n_heads // cfg.n_kv_heads)
    Q = np.vstack([contributions[q_name][:, q, h], baseline[q_name][q, h]])
    K = np.vstack([contributions[k_name][:, k, kv], baseline[k_name][k, kv]])
    return Q, K


def via_heads(model, transcoders, tokens) -> dict:
    """{(M, G): (contributions, baseline)}: the part of every later head's queries and keys that
    head G of block M carries (the graph with that head alone minus the graph with none)."""
    cfg = model.cfg
    keep = qk_hooks(cfg)
    if cfg.n_layers < 2:
        return {}
    none = attribute(model, transcoders, tokens, keep=keep, heads=set()).extras
    out = {}
    for M in range(cfg.n_layers - 1):
        for G in range(cfg.n_heads):
            only = attribute(model, transcoders, tokens, keep=keep, heads={(M, G)}).extras
            out[(M, G)] = tuple(
                {n: only[part][n] - none[part][n] for n in keep}
                for part in ("contributions", "baseline")
            )
    return out


def score(truth: dict, per_prompt: list[np.ndarray], majority: float = 0.5) -> dict:
    """The graph's scores over prompts against the truth (`find_circuits`'s report): ROC-AUC of
    the mean score for the circuit's edges, and the precision and recall of the edges the graph
    keeps (a nonzero score on at least `majority` of the prompts); which edges disagree."""
    labels = np.array([e["in_circuit"] for e in truth["edges"]])
    scores = np.array(per_prompt)  # (prompts, edges)
    mean = scores.mean(0)
    kept = (scores > 0).mean(0) >= majority
    names = [f"{e['src']}>{e['dst']}" for e in truth["edges"]]
    tp = int((kept & labels).sum())
    return {
        "auc": roc_auc(mean, labels),
        "precision": float(tp / kept.sum()) if kept.any() else float("nan"),
        "recall": float(tp / labels.sum()) if labels.any() else float("nan"),
        "kept": int(kept.sum()),
        "circuit": int(labels.sum()),
        "kept_edges": [n for n, k in zip(names, kept) if k],
        "missed": [n for n, k, t in zip(names, kept, labels) if t and not k],
        "extra": [n for n, k, t in zip(names, kept, labels) if k and not t],
    }


def components(edge_names) -> set[str]:
    """The heads, MLPs and embeddings a set of edges `src>dst` touches."""
    out = set()
    for name in edge_names:
        src, dst = name.split(">")
        out.add(src)
        if dst != "logits":
            out.add(dst[:-2] if dst.endswith((".q", ".k", ".v")) else dst)
    return out
