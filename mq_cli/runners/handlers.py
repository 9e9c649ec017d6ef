"""Running a queue's handler on one message at a time: what a run returns
(:class:`Outcome`), the :class:`Runner` protocol, the handler's environment and
its time limit (:class:`Pacer`). Finding a handler from its path is
:mod:`mq_cli.runners.paths`.

Python handlers run in a long-lived child process (:mod:`mq_cli.runners.python`),
so a timeout can always stop them. Inside one, :func:`current_message` tells
the handler which message it is working on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

ERROR_LIMIT = 4000
"""Longest ``Outcome.error`` (and so ``last_error``) in characters."""

FORMATS = ("json", "text", "bytes")


@dataclass(frozen=True)
class MessageInfo:
    """What a handler may learn about the message it is running."""

    id: int
    queue: str
    error_count: int  # failures so far: 0 on the first try
    created_at: datetime  # timezone-aware UTC


@dataclass(slots=True)  # not frozen: made once per message, and frozen costs ~1 µs each
class Outcome:
    """How one run of a handler ended."""

    ok: bool
    error: str | None = None  # at most ERROR_LIMIT characters, the end of long text
    timed_out: bool = False
    started: bool = True  # False: the handler never ran on it (stopping, no longer held)
    seconds: float | None = field(default=None, compare=False)  # the handler's run time


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


_current: MessageInfo | None = None


def current_message() -> MessageInfo:
    """The message the running handler is working on (id, queue, error_count, created_at).

    Call it from inside a Python handler, e.g. to make retries idempotent or to
    give up differently on the last attempt. Outside a handler it raises
    RuntimeError.
    """
    if _current is None:
        raise RuntimeError("current_message() works only inside a handler run by `mq drain`")
    return _current


def _set_current(info: MessageInfo | None) -> None:
    global _current
    _current = info


Job = tuple[bytes, MessageInfo]
"""A payload and what its handler may learn about it (:func:`current_message`)."""


class Runner(Protocol):
    """Runs one handler on messages, one at a time; made by :func:`make_runner`."""

    def start(self) -> None:
        """Get ready to run; HandlerNotFound if the handler cannot be loaded."""

    def run(
        self,
        payload: bytes,
        info: MessageInfo,
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
    ) -> Outcome:
        """Run the handler on one payload; ``tick()`` is called at least every ``tick_every`` s."""
        ...

    def run_many(
        self,
        jobs: Sequence[Job],
        admit: Callable[[int], bool],
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
        not_after: Callable[[], float | None] | None = None,
        ending_soon: Callable[[], None] | None = None,
        more: Callable[[], int] | None = None,
    ) -> Generator[tuple[int, Outcome], None, None]:
        """Run the handler on each job; yield (index, outcome) as each one ends.

        A job starts only if ``admit(index)`` says so just before, and not after
        the ``time.monotonic()`` that ``not_after()`` gave when it was handed
        over (the drain's deadline, and how long its claim is safe from gc);
        one that does not start is yielded with :data:`NOT_STARTED`. Every job
        is yielded exactly once.

        A runner that hands jobs over ahead calls ``ending_soon()`` once the jobs
        not yet ended should end within a few milliseconds at its handlers' recent
        pace (AHEAD_WITHIN), and ``more()`` once every job has been yielded:
        ``more`` appends jobs to ``jobs`` (a list then) and says how many, 0 to
        end; then ``ending_soon()`` may come again. One that runs a job at a time
        calls neither.
        """
        ...

    def stop(self) -> None:
        """Start no further job; the running one finishes. Safe from a signal handler."""

    def close(self) -> None:
        """Stop gracefully (nothing is running between messages)."""

    def kill(self) -> None:
        """SIGKILL whatever runs now; safe to call from a signal handler."""


class OneAtATime:
    """``run_many`` for a runner that can only ``run`` one message after another."""

    _stopped = False

    def run(
        self,
        payload: bytes,
        info: MessageInfo,
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
    ) -> Outcome:
        raise NotImplementedError

    def run_many(
        self,
        jobs: Sequence[Job],
        admit: Callable[[int], bool],
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
        not_after: Callable[[], float | None] | None = None,
        ending_soon: Callable[[], None] | None = None,
        more: Callable[[], int] | None = None,
    ) -> Generator[tuple[int, Outcome], None, None]:
        self._stopped = False
        for index, (payload, info) in enumerate(jobs):
            # admit() first: it may renew what not_after() gives (a heartbeat).
            if self._stopped or not admit(index):
                yield index, NOT_STARTED
                continue
            limit = not_after() if not_after is not None else None
            if limit is not None and time.monotonic() >= limit:
                yield index, NOT_STARTED
                continue
            started = time.monotonic()
            outcome = self.run(payload, info, timeout, tick, tick_every)
            if outcome.seconds is None:
                outcome = replace(outcome, seconds=time.monotonic() - started)
            yield index, outcome

    def stop(self) -> None:
        self._stopped = True


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
