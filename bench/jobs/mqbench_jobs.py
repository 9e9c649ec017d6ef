"""Handlers and jobs the bench runs: the same no-op for mq, RQ (and huey, see mqbench_huey)."""

from __future__ import annotations

import os

_record = None


def noop(payload: object) -> None:
    """Does nothing: what is measured is the queue's own cost per message."""


def record(payload: object) -> None:
    """Appends the message's id to a file per worker process (exactly-once check)."""
    global _record
    # mq_cli.current_message() is what the README documents; mq_cli/__init__.py does
    # not export it (yet), so take it from where it lives.
    from mq_cli.runners.handlers import current_message

    if _record is None:
        directory = os.environ["MQBENCH_RECORD_DIR"]
        _record = os.open(
            os.path.join(directory, f"{os.getpid()}.ids"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
    os.write(_record, b"%d\n" % current_message().id)
