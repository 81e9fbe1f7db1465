"""Many seeds, one geometry? Align every seed's plane to a reference seed and measure which
structures hold in every seed that learned the task (necessary, for this architecture and task)
and which are each seed's own choice.

The symmetry. A model without LayerNorm computes the same function after any orthogonal map R of
its residual stream (row vectors, x -> x R) with the readers and writers of the stream
compensating (`rotate_tensors`):

    W_E R, W_pos R;  R^T W_Q, R^T W_K;  R^T W_V and W_O R (or R^T W_V R without W_O, where the
    head's value is itself a residual vector);  R^T W_in, W_out R, b_out R;  R^T W_U.

So the residual-stream planes (embeddings x + p, the head outputs written into the stream, z,
the landscape's input) are compared after one R per seed, fitted by orthogonal Procrustes with
reflections allowed on the V x T points x_v + p_t (about the origin: a translation is not a
symmetry, the attention reads x W_Q with no bias). Under that symmetry q and k do not change at
all; across seeds the query/key space has its own freedom: any common orthogonal map S of a
head's q and k keeps every q . k. So each head gets its own S, fitted jointly on its queries
and keys (never one map for q and another for k, which would change the scores). Values are
compared as what the head writes into the residual stream (v W_O, or v itself without W_O), so
they move with R. With LayerNorm the rotation is not a symmetry (LN centres along the all-ones
direction); the fit is then only a common frame to draw in, and `Comparison.symmetric` says so.

The measures. Generic, for any task: the final rule error, the alignment residual, whether the
position embeddings form a monotone ladder, and (for d_model == 2) the cyclic order of the rule
targets' zones around the output landscape. Task-declared: a task that declares recall roles
(`Task.recall`: "after a marker, recall the most recent wanted token", such as plus-last-even)
also gets: wanted / other / marker classes pairwise linearly separable (token embeddings;
token + position points), the wanted tokens' embeddings on a line (and their order
along it), the marker's queries separable from the other queries, recency read from the
weights (for each wanted key token, later positions score higher with the marker's queries),
recency in the held-out windows (`algorithm.recency_share`, for all seeds at once), and
whether the zones' cyclic order is the wanted tokens' order along their line. Those reuse the
small measures of `analysis.algorithm` and `analysis.geometry`.

A structure that holds in every seed that learned the task is reported as necessary (for this
architecture, task and recipe: evidence from the seeds compared, not a proof); one that does not
as varying. Orders (of the line, of the zones) are compared up to reversal, and for cycles up to
rotation and reflection, since the seeds are aligned by maps that may reflect.

The package. symmetry.py holds the rotation and the Procrustes fit; measures.py the measures
and `compare_runs`; report.py what a comparison reports (tables, numbers, JSON, the aligned
arrays the figures draw); figures.py draws them and is the only module that loads matplotlib,
so it is imported on its own (`from flatformer.compare import figures`).

    c = compare_runs(load_run("runs/plus-last-even-seeds"))
    print(summary(c))
"""

from .measures import (
    SUCCESS,
    Comparison,
    RecallSpec,
    WindowRows,
    canonical_cycle,
    canonical_line,
    collapse_cycle,
    compare_models,
    compare_runs,
    recall_spec,
    window_rows,
    zone_circle,
    zone_sequence,
)
from .report import (
    ORDERS,
    STRUCTURES,
    AlignedLandscape,
    aligned_landscapes,
    grokking_seeds,
    numbers,
    panel_limits,
    per_seed,
    structure_label,
    summary,
    to_json,
)
from .symmetry import procrustes, rotate_tensors

__all__ = [
    "ORDERS",
    "STRUCTURES",
    "SUCCESS",
    "AlignedLandscape",
    "Comparison",
    "RecallSpec",
    "WindowRows",
    "aligned_landscapes",
    "canonical_cycle",
    "canonical_line",
    "collapse_cycle",
    "compare_models",
    "compare_runs",
    "grokking_seeds",
    "numbers",
    "panel_limits",
    "per_seed",
    "procrustes",
    "recall_spec",
    "rotate_tensors",
    "structure_label",
    "summary",
    "to_json",
    "window_rows",
    "zone_circle",
    "zone_sequence",
]
