"""What a handler is given and what its run returns: :class:`MessageInfo`,
:class:`Outcome`, the handler's environment and its time limit (:class:`Pacer`).
The :class:`~mq_cli.runners.runner.Runner` protocol is :mod:`mq_cli.runners.runner`;
finding a handler from its path is :mod:`mq_cli.runners.paths`.

Python handlers run in a long-lived child process (:mod:`mq_cli.runners.python`),
so a timeout can always stop them. Inside one, :func:`current_message` tells
the handler which message it is working on.

The handler's child imports this module at every start, before it can run a
message, so it stays light: no ``typing``, no ``dataclasses`` (which imports
``inspect``: together ~10 ms of every drain that runs a Python handler). The
two records below are written out by hand for that reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime

ERROR_LIMIT = 4000
"""Longest ``Outcome.error`` (and so ``last_error``) in characters."""

FORMATS = ("json", "text", "bytes")


class MessageInfo:
    """What a handler may learn about the message it is running (read-only)."""

    __slots__ = __match_args__ = ("id", "queue", "error_count", "created_at")

    id: int
    queue: str
    error_count: int  # failures so far: 0 on the first try
    created_at: datetime  # timezone-aware UTC

    def __init__(self, id: int, queue: str, error_count: int, created_at: datetime) -> None:
        _set_id(self, id)
        _set_queue(self, queue)
        _set_error_count(self, error_count)
        _set_created_at(self, created_at)

    def _fields(self) -> tuple[int, str, int, datetime]:
        return self.id, self.queue, self.error_count, self.created_at

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: MessageInfo is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: MessageInfo is read-only")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, MessageInfo)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"MessageInfo(id={self.id!r}, queue={self.queue!r}, "
            f"error_count={self.error_count!r}, created_at={self.created_at!r})"
        )

    def __reduce__(self) -> tuple[type[MessageInfo], tuple[int, str, int, datetime]]:
        return MessageInfo, self._fields()


# The slots' own setters, past the read-only __setattr__ (a third cheaper than
# object.__setattr__; the drain makes a MessageInfo for every message it runs).
_set_id, _set_queue, _set_error_count, _set_created_at = (
    MessageInfo.__dict__[name].__set__ for name in MessageInfo.__slots__
)


class Outcome:
    """How one run of a handler ended."""

    __slots__ = __match_args__ = ("ok", "error", "timed_out", "started", "seconds")

    def __init__(
        self,
        ok: bool,
        error: str | None = None,  # at most ERROR_LIMIT characters, the end of long text
        timed_out: bool = False,
        started: bool = True,  # False: the handler never ran on it (stopping, no longer held)
        seconds: float | None = None,  # the handler's run time; not compared
    ) -> None:
        self.ok = ok
        self.error = error
        self.timed_out = timed_out
        self.started = started
        self.seconds = seconds

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Outcome)
        return (self.ok, self.error, self.timed_out, self.started) == (
            other.ok,
            other.error,
            other.timed_out,
            other.started,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return (
            f"Outcome(ok={self.ok!r}, error={self.error!r}, timed_out={self.timed_out!r}, "
            f"started={self.started!r}, seconds={self.seconds!r})"
        )


NOT_STARTED = Outcome(ok=False, started=False)


def bounded(text: str, limit: int = ERROR_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, keeping its end.

    The end of an error is what explains it: the exception line comes last in
    a traceback, and a failing program's last words are usually its reason.
    """
    if len(text) <= limit:
        return text
    return "..." + text[len(text) - limit + 3 :]


def storable(error: object) -> str | None:
    """A handler's error as the database can store it: bounded, and valid UTF-8."""
    if error is None:
        return None
    # Lone surrogates survive JSON but not the database's UTF-8.
    return bounded(str(error).encode("utf-8", "replace").decode("utf-8"))


# The running message: a MessageInfo, or (in the handler's child) what makes one,
# called only if the handler asks (most never do: ~2 µs a message saved). Never
# written back: a thread the handler left running must not make the next
# message's info the last one's.
_current: MessageInfo | Callable[[], MessageInfo] | None = None


def current_message() -> MessageInfo:
    """The message the running handler is working on (id, queue, error_count, created_at).

    Call it from inside a Python handler, e.g. to make retries idempotent or to
    give up differently on the last attempt. Outside a handler it raises
    RuntimeError.
    """
    current = _current
    if current is None:
        raise RuntimeError("current_message() works only inside a handler run by `mq drain`")
    return current if isinstance(current, MessageInfo) else current()


def _set_current(info: MessageInfo | Callable[[], MessageInfo] | None) -> None:
    global _current
    _current = info


Job = tuple[bytes, MessageInfo]
"""A payload and what its handler may learn about it (:func:`current_message`)."""


def handler_environ(hide: Sequence[str] = ()) -> dict[str, str]:
    """Our environment minus the variables in ``hide`` (the database's credentials).

    A handler has no business with them, and one that prints its environment
    (or fails with it in a traceback) would put a password into last_error.
    """
    env = dict(os.environ)
    for name in hide:
        env.pop(name, None)
    return env


class Pacer:
    """When to call ``tick`` and when the time limit is up, for a runner's wait loop.

    The drain is single-threaded: while a handler runs, the runner's wait loop
    is the only place its heartbeat can be refreshed, so waits are cut into
    slices no longer than ``tick_every``.
    """

    def __init__(self, timeout: float | None, tick: Callable[[], None], tick_every: float):
        now = time.monotonic()
        self.timeout = timeout or None
        self.deadline = now + timeout if timeout else None
        self.every = max(tick_every, 0.001)
        self.next_tick = now + self.every
        self.tick = tick
        self.ticks = 0  # how many times tick() was called

    def wait(self, cap: float | None = None) -> float:
        """Call ``tick`` if due; then the seconds to wait before the next tick or deadline."""
        now = time.monotonic()
        if now >= self.next_tick:
            # Scheduled from before the call: a slow tick (a slow database)
            # must not stretch the interval between two ticks.
            self.next_tick = now + self.every
            self.ticks += 1
            self.tick()
            now = time.monotonic()
        wait = self.next_tick - now
        if self.deadline is not None:
            wait = min(wait, self.deadline - now)
        if cap is not None:
            wait = min(wait, cap)
        return max(wait, 0.0)

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def timeout_error(self) -> str:
        return f"timed out after {self.timeout:g}s"
