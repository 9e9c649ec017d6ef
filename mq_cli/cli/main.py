"""The `mq` command: the group (common.py) with every command registered on it.

Each command module registers its commands on the group when it is imported:
produce.py (init, enqueue), draining.py (drain), observe.py (stats, status,
pause, resume), operate.py (gc, list, show, retry, delete, purge, check), web.py
(web: the operator console).
"""

from __future__ import annotations

import os
import sys
import threading

from mq_cli.cli import draining, observe, operate, produce, web
from mq_cli.cli.common import cli

__all__ = ["cli", "main"]
COMMAND_MODULES = (produce, draining, observe, operate, web)  # imported for their commands


def main() -> None:
    try:
        cli(prog_name="mq")
    except SystemExit as done:
        code = done.code
        if not isinstance(code, int) or _threads_left():
            raise
    else:
        code = 0
    # Done: what the command opened is closed (State.close), its children reaped.
    # Python's teardown of every module would take ~30 ms more on each cron run
    # with psycopg loaded; the output is flushed first, and a flush that fails
    # (a closed pipe) ends the way Python's own exit would.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        raise SystemExit(code) from None
    os._exit(code)


def _threads_left() -> bool:
    """A thread Python's exit would wait for (mq starts none: a library might)."""
    return any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
