"""Representational geometry: RDMs, CKA and shape distances over a model's named activations."""

from .crossnobis import crossnobis_rdm
from .measures import (
    correlation_rdm,
    euclidean_rdm,
    kendall_tau_a,
    linear_cka,
    procrustes_distance,
    rbf_cka,
    spearman,
    whitened_cosine,
)
from .stimuli import representations, stimuli

__all__ = [
    "correlation_rdm",
    "crossnobis_rdm",
    "euclidean_rdm",
    "kendall_tau_a",
    "linear_cka",
    "procrustes_distance",
    "rbf_cka",
    "representations",
    "spearman",
    "stimuli",
    "whitened_cosine",
]
