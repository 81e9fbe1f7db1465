"""flatformer: transformers small enough to see through.

The package's top level is kept light: `import flatformer` loads neither torch nor matplotlib.
It exports `__version__` and `show` (the explorer inline in a notebook); the rest of the API
lives in its modules (`flatformer.store.runs.load_run`, `flatformer.model.transformer.Transformer`,
`flatformer.training.trainer.train`, ...).

>>> import flatformer
>>> flatformer.__version__
'0.2.0'
"""

__version__ = "0.2.0"


def __getattr__(name):
    # `show` is imported on first use, so `import flatformer` stays light (no explorer, no matplotlib).
    if name == "show":
        from .publish.notebook import show

        return show
    raise AttributeError(f"module 'flatformer' has no attribute {name!r}")
