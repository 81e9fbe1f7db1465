"""Measured interpretability: activation patching, the logit lens, each head's QK/OV circuits,
the paper's algorithm step by step, induction heads and grokking's progress measures.

Everything here takes a `Transformer` (or a run, or plain arrays) and returns numbers; nothing
prints, draws or saves. The commands render the results as tables, the figures and movies draw
them.
"""
