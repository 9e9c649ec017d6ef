"""Running handlers: the Python handler's child process and its frame protocol
(python.py, child.py), ``exec:`` programs (programs.py), what a runner does (runner.py),
what a handler is given (handlers.py), handler paths (paths.py)
and the guard that stops a handler its drain can no longer stop (guard.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from mq_cli.runners.handlers import FORMATS
from mq_cli.runners.paths import _split_path, is_exec

TYPE_CHECKING = False  # not typing's: the handler's child imports this package at start
if TYPE_CHECKING:
    from mq_cli.runners.runner import Runner


def make_runner(path: str, fmt: str, hide: Sequence[str] = ()) -> Runner:
    """A runner for a handler path and a queue format (json, text or bytes);
    the handler's environment lacks the variables in ``hide``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if is_exec(path):
        from mq_cli.runners.programs import ExecRunner

        return ExecRunner(path, hide)
    _split_path(path)
    from mq_cli.runners.python import PythonRunner

    return PythonRunner(path, fmt, hide)
