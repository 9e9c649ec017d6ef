"""The `mq` command (click): one module per command group, over the Python API."""

from mq_cli.cli.main import cli, main

__all__ = ["cli", "main"]
