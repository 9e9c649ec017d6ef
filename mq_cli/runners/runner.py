"""The :class:`Runner` protocol: what the drain asks of a handler's runner
(made by :func:`mq_cli.runners.make_runner`), and :class:`OneAtATime`, the
``run_many`` of a runner that runs one message after another (``exec:``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Protocol

from mq_cli.runners.handlers import NOT_STARTED, Job, MessageInfo, Outcome


class Runner(Protocol):
    """Runs one handler on messages, one at a time; made by :func:`make_runner`."""

    def start(self) -> None:
        """Get ready to run; HandlerNotFound if the handler cannot be loaded."""

    def launch(self) -> None:
        """Begin getting ready without waiting (start() or the first job waits); nothing
        for a runner that has nothing to start ahead. close() ends what it began."""

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

    def launch(self) -> None:
        pass  # a program starts per message: nothing to start ahead

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
                seconds = time.monotonic() - started
                outcome = Outcome(
                    outcome.ok, outcome.error, outcome.timed_out, outcome.started, seconds
                )
            yield index, outcome

    def stop(self) -> None:
        self._stopped = True
