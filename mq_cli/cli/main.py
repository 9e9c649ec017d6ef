"""The `mq` command: the group (common.py) with every command registered on it.

Each command module registers its commands on the group when it is imported:
produce.py (init, enqueue), draining.py (drain), observe.py (stats, status,
pause, resume), operate.py (gc, list, show, retry, delete, purge, check), web.py
(web: the operator console).
"""

from __future__ import annotations

from mq_cli.cli import draining, observe, operate, produce, web
from mq_cli.cli.common import cli

__all__ = ["cli", "main"]
COMMAND_MODULES = (produce, draining, observe, operate, web)  # imported for their commands


def main() -> None:
    cli(prog_name="mq")
