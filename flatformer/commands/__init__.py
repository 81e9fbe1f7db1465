"""One module per command group; each registers its commands on `flatformer.cli.app`."""
