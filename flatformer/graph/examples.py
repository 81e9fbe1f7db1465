"""What each transcoder feature of a graph reads: its largest activations over the run's
held-out windows, each with the token it fired on and the tokens before it (the feature
dashboards of Bricken et al. 2023, "Towards Monosemanticity", and Neuronpedia's "top
activations")."""

from __future__ import annotations

import numpy as np

from ..dictionary.activations import read, windows
from ..tasks.windows import evenly_spaced

TOP, CONTEXT, WINDOWS = 5, 4, 512


def top_examples(
    run, model, transcoders, features, top: int = TOP, context: int = CONTEXT, n: int = WINDOWS
) -> dict[str, list[dict]]:
    """For each (layer, index) in `features`, keyed `"{layer}_{index}"`: its `top` largest
    activations over (at most `n`, evenly spaced) held-out windows, largest first, each
    {"tokens": the token and up to `context` before it, as text; "activation"}; only those
    above 0."""
    held = windows(run, 1)["eval"]
    if not len(held) or not features:
        return {}
    held = held[evenly_spaced(len(held), min(n, len(held)))]
    T = held.shape[1]
    wanted: dict[int, set[int]] = {}
    for layer, index in features:
        wanted.setdefault(int(layer), set()).add(int(index))
    out = {}
    for tc in transcoders:
        if tc.layer not in wanted:
            continue
        f = tc.encode(read(model, held, [tc.hook_in])[tc.hook_in])  # (windows * T, m)
        for index in sorted(wanted[tc.layer]):
            column = f[:, index]
            order = np.argsort(-column, kind="stable")[:top]
            rows = []
            for j in order[column[order] > 0]:
                b, t = divmod(int(j), T)
                rows.append(
                    {
                        "tokens": [run.vocab[x] for x in held[b, max(0, t - context) : t + 1]],
                        "activation": float(column[j]),
                    }
                )
            out[f"{tc.layer}_{index}"] = rows
    return out
