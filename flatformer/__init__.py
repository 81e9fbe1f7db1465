"""flatformer: transformers small enough to see through."""

__version__ = "0.1.0"
