"""SIGTERM and SIGINT that come while a drain starts (its config, its imports,
its first connection), before it installs its own handlers: remembered rather
than fatal, so the drain stops as the contract says a signal stops it (exit 0,
nothing claimed), and a `--processes` parent that forwarded the signal does not
find a child killed by it.

A `--processes` parent starts each child with both signals blocked
(:func:`blocked`): one that comes before the child's Python runs (between fork
and exec it would go to the parent's handler, in a copy about to be replaced,
and be lost) waits, pending, until the child's :func:`catch_early` unblocks it.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

log = logging.getLogger("mq")


def say_stopping(name: str, handler_running: bool, message: int | None, away: bool = False) -> None:
    """What a drain's first stop signal does, said truly (``away``: the database is,
    and the drain holds messages: it can give nothing back until it returns)."""
    if away:
        log.warning(
            "got %s while the database is away: what this drain holds is recorded or "
            "returned if it comes back soon, else left for gc (a second signal leaves it now)",
            name,
        )
        return
    if not handler_running:
        # Waiting, claiming, starting: nothing to finish. Stopping as asked is
        # no news for cron's mail (`timeout` under cron sends this every run).
        log.info("got %s: stopping; no handler was running", name)
        return
    which = f"message {message}'s handler" if message is not None else "the running handler"
    log.warning(
        "got %s: letting %s finish, then returning this drain's unstarted messages to "
        "ready (a second signal stops the handler at once)",
        name, which,
    )  # fmt: skip


class Early:
    """A handler that remembers the first stop signal it got."""

    def __init__(self) -> None:
        self.got: signal.Signals | None = None
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.got = self.got or signal.Signals(signum)

    def restore(self) -> None:
        """The handlers from before :func:`catch_early` (a process that goes on: tests)."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def catch_early() -> Early:
    """Install :class:`Early` for SIGTERM and SIGINT (the drain replaces it later)."""
    early = Early()
    early.previous = {sig: signal.signal(sig, early) for sig in STOP_SIGNALS}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one pending is delivered now
    return early


@contextmanager
def blocked() -> Iterator[None]:
    """SIGTERM and SIGINT held back meanwhile (and in a process started meanwhile,
    which inherits the mask through exec); delivered at the end."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def caught(handlers: Iterable[Any]) -> signal.Signals | None:
    """The signal an :class:`Early` among ``handlers`` (those a drain replaced) got."""
    for handler in handlers:
        if isinstance(handler, Early) and handler.got is not None:
            return handler.got
    return None
