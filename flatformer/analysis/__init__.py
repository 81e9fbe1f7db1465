"""Measured interpretability: interventions, logit lens, circuits, sampling and the algorithm.

Everything here takes a `Transformer` (or plain arrays) and returns numbers; nothing prints or
saves. The `flatformer analyze` and `flatformer generate` commands render the results.
"""
