"""Attribution graphs (Ameisen et al. 2025, "Circuit Tracing"): the replacement model of one
prompt, its graph of direct effects, pruning by influence, attention explained by QK
attributions, and the graph written as circuit-tracer writes it for Neuronpedia's viewer."""

from .attribution import Graph, attribute, salient_logits
from .replacement import Replacement
from .transcoders import Transcoder, load_transcoders, save_transcoders, train_transcoders

__all__ = [
    "Graph",
    "Replacement",
    "Transcoder",
    "attribute",
    "load_transcoders",
    "salient_logits",
    "save_transcoders",
    "train_transcoders",
]
