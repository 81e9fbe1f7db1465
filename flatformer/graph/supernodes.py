"""Supernodes found automatically (circuit-tracer issue 20; the paper groups features by hand):
the kept features of one block whose decoder directions point the same way, cos >= a threshold,
joined transitively (single linkage), so that one feature at several positions, and features
that write the same thing, become one supernode. Written where Neuronpedia's viewer reads
supernodes, `qParams.supernodes`: one list per group, its label then its node ids.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 0.9


def decoder_groups(graph, node_mask, transcoders, threshold: float = THRESHOLD) -> list[list[int]]:
    """Groups (node indices, two or more each) of the kept features, block by block, whose
    decoder rows have cosine >= `threshold`, closed under joining."""
    by_layer = {tc.layer: tc for tc in transcoders}
    groups = []
    for L, tc in by_layer.items():
        nodes = [
            i for i in np.flatnonzero(node_mask[: graph.n_features]) if graph.features[i, 0] == L
        ]
        if len(nodes) < 2:
            continue
        rows = tc.W_dec[graph.features[nodes, 2]]
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        unit = rows / np.where(norms > 0, norms, 1.0)
        close = unit @ unit.T >= threshold
        parent = list(range(len(nodes)))

        def root(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for a, b in zip(*np.nonzero(np.triu(close, 1))):
            parent[root(a)] = root(b)
        found: dict[int, list[int]] = {}
        for j, node in enumerate(nodes):
            found.setdefault(root(j), []).append(int(node))
        groups += [g for g in found.values() if len(g) > 1]
    return groups


def supernode_params(graph, groups: list[list[int]], ids: list[str]) -> list[list[str]]:
    """Neuronpedia's `qParams.supernodes`: [label, node id, ...] per group; the label names the
    block and the transcoder features in it."""
    out = []
    for group in groups:
        L = int(graph.features[group[0], 0])
        features = sorted({int(graph.features[i, 2]) for i in group})
        label = f"block {L} features {', '.join(map(str, features))}"
        out.append([label, *[ids[i] for i in group]])
    return out


def pair_agreement(groups: list[list[int]], roles: dict[int, str]) -> dict:
    """How a grouping of nodes agrees with known roles (node -> role), counted over pairs of the
    nodes `roles` names (the pair-counting precision and recall of clusterings, Hubert & Arabie
    1985): precision, of the pairs grouped together, those sharing a role; recall, of the pairs
    sharing a role, those grouped together. nan where there is no pair to count."""
    group_of = {n: g for g, members in enumerate(groups) for n in members}
    nodes = sorted(roles)
    together = same = both = 0
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            g = a in group_of and group_of.get(a) == group_of.get(b)
            r = roles[a] == roles[b]
            together += g
            same += r
            both += g and r
    return {
        "precision": both / together if together else float("nan"),
        "recall": both / same if same else float("nan"),
        "pairs_grouped": together,
        "pairs_same_role": same,
    }
