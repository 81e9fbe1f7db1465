"""The numbers every view reads, computed in one place: figures, movies, analysis, compare and
the explorer's export all call this package, and it draws, prints and saves nothing (no
matplotlib, typer or rich in it or below it; tests/test_layering.py checks).

- `plane`: `Plane` / `fit_plane` (identity in 2-D, else PCA), `square_limits`, `grid`, `Field`.
- `points`: every token at every position (`all_points`, `embeddings`, `projections`: Q, K, V),
  what each head writes (`write_heads`: into its slice or through W_O), `point_scores`,
  `qk_field`.
- `landscape`: the output network from the residual stream (`output_logits`, `unembed`) and
  over a plane grid (`landscape`).
- `trace`: every activation of one sequence.
- `probs`: softmax, log-softmax, entropy, KL, and the one KL direction of a knob's cost.
- `sampling`: the one sampler (temperature, top-k, top-p, a shown draw, sliding window).
- `batches`: prompts of different lengths, one batch per length.
- `knobs`: head zero/mean ablation, MLP off, positions off, attention scaled by beta, and the
  held-out windows mean ablation averages over (`reference_windows`).
"""

from .batches import by_length, next_token_logits
from .knobs import (
    BETAS,
    MEAN_WINDOWS,
    Hooks,
    Knob,
    combine,
    head_means,
    knob_kls,
    mean_head,
    mlp_off,
    positions_off,
    reference_windows,
    scale_scores,
    standard_knobs,
    switches,
    zero_head,
)
from .landscape import (
    Landscape,
    NotApplicable,
    NotInPlane,
    landscape,
    output_logits,
    require_plane,
    unembed,
)
from .plane import Field, Plane, fit_plane, fitted_limits, grid, square_limits
from .points import (
    Embeddings,
    Projections,
    all_points,
    all_points_tokens,
    combined_points,
    embeddings,
    head_outputs,
    head_weight,
    point_label,
    point_scores,
    projections,
    qk_field,
    rows_per_pass,
    write_heads,
)
from .probs import KL_DIRECTION, entropy, kl_divergence, knob_kl, log_softmax, softmax
from .sampling import continue_prompts, distribution, draw, generate
from .trace import BlockTrace, Trace, trace

__all__ = [
    "BETAS",
    "BlockTrace",
    "MEAN_WINDOWS",
    "Embeddings",
    "Field",
    "Hooks",
    "KL_DIRECTION",
    "Knob",
    "Landscape",
    "NotApplicable",
    "NotInPlane",
    "Plane",
    "Projections",
    "Trace",
    "all_points",
    "all_points_tokens",
    "by_length",
    "combine",
    "combined_points",
    "continue_prompts",
    "distribution",
    "draw",
    "embeddings",
    "entropy",
    "fit_plane",
    "generate",
    "grid",
    "head_means",
    "head_outputs",
    "head_weight",
    "kl_divergence",
    "knob_kl",
    "knob_kls",
    "landscape",
    "log_softmax",
    "mean_head",
    "mlp_off",
    "next_token_logits",
    "output_logits",
    "point_label",
    "point_scores",
    "positions_off",
    "projections",
    "qk_field",
    "rows_per_pass",
    "reference_windows",
    "require_plane",
    "scale_scores",
    "softmax",
    "square_limits",
    "standard_knobs",
    "switches",
    "trace",
    "unembed",
    "write_heads",
    "zero_head",
]
