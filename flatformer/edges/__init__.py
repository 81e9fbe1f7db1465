"""Circuits as edge sets: the computational graph of a model, any set of its edges ablated, the
exact effect of every edge, and the fast methods (EAP, EAP-IG, ACDC) scored against it.

`graph.py` holds the graph and the edge-ablated forward and backward passes; `methods.py` the
ablations, metrics, exact effects, path patching, the fast methods and the circuit. (The QK/OV
singular values of each head live in `flatformer.analysis.circuits`; this package is about
edges.)
"""
