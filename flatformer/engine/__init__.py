"""The numeric engine: the NumPy reference model (forward, hand-written backward, loss),
AdamW, the float32 engine's fused elementwise steps and the compiled kernels."""
