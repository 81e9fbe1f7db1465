"""flatformer: transformers small enough to see through."""

__version__ = "0.1.0"


def __getattr__(name):
    # `show` is imported on first use, so `import flatformer` stays light (no explorer, no matplotlib).
    if name == "show":
        from .notebook import show
        return show
    raise AttributeError(f"module 'flatformer' has no attribute {name!r}")
