"""The one sampler lives in the numeric layer (`flatformer.readout.sampling`, which
`flatformer generate` and the figures call); this name is kept for code (the tests) that imports
it from the analysis."""

from ..readout.sampling import (
    Step,
    check_settings,
    distribution,
    draw,
    entropy,  # noqa: F401
    generate,
)
