"""The model a user holds, and the same weights in PyTorch and TransformerLens."""
