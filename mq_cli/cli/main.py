"""The `mq` command: the group (common.py) with every command registered on it.

Each command module registers its commands on the group when it is imported:
produce.py (init, enqueue), draining.py (drain), observe.py (stats, status,
pause, resume, stop), operate.py (gc, list, show, retry, delete, purge, check), web.py
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
        if not isinstance(code, int) or _plain_exit_needed():
            raise
    else:
        code = 0
        if _plain_exit_needed():
            return
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


def _plain_exit_needed() -> bool:
    """What Python's own exit does that os._exit would skip: write a profiler's or a
    tracer's results (python -m cProfile, coverage), or wait for a non-daemon thread
    (mq starts none: a library might)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    return any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
