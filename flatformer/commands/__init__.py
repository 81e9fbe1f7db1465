"""One module per command group; each registers its commands on the application of `app.py`
(never importing `flatformer.commands.cli`, which loads them)."""
