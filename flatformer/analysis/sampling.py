"""Reading out: the one sampler lives in the numeric layer (`flatformer.readout.sampling`);
`flatformer generate` and the analysis import it from here."""

from ..readout.sampling import (Step, check_settings, distribution, draw, entropy,  # noqa: F401
                                generate)
