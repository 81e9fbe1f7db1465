"""Importers: other frameworks' checkpoints as a flatformer `ModelConfig` and its tensors.

Each format is one module with a `read(path) -> Imported`. Loading runs no code from the file:
PyTorch files go through `torch.load(weights_only=True)`.
"""

from .common import Imported

__all__ = ["Imported"]
