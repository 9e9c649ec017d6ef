"""The run log's writer: each drain run records itself and its results, for `mq status`.

A drain keeps its results in memory (counts, and wait and duration histograms
per queue) and writes them a few statements at a time (host/runlog.py holds the
terms its readers share: the slice and counts intervals, the histogram, why a
user cannot read it). Nothing is written per message, except once for a message
that runs for a second or more.

The run log is an observer: a write that fails is logged as a warning and the
drain carries on. Times are Unix seconds of the database's clock (the drain
measures its offset from the host's clock once per run).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mq_cli.core.errors import DatabaseError, MqError, PermissionDenied
from mq_cli.host.runlog import (
    COUNTS_SECONDS,
    RUNNING_AFTER,
    SLICE_SECONDS,
    Histogram,
    denied_text,
    problem,
)

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config
    from mq_cli.core.models import Message
    from mq_cli.drain.report import DrainReport
    from mq_cli.runners.handlers import Outcome

log = logging.getLogger("mq")


@dataclass
class _Tally:
    """One queue's results since the last slice was written."""

    start: float
    done: int = 0
    failed: int = 0
    wait_sum: float = 0.0
    duration_sum: float = 0.0
    wait: Histogram = field(default_factory=Histogram)
    duration: Histogram = field(default_factory=Histogram)


class RunLog:
    """One drain run's record. Every method is safe to call: none raises."""

    def __init__(
        self,
        config: Config,
        backend: Callable[[], Backend],
        owner: Callable[[], str],
        report: DrainReport,
    ):
        """``owner``: the drain's owner token as it is when the run is recorded (a
        drain may mark its token once it runs)."""
        self.enabled = config.run_log_retention > 0
        self.retention = config.run_log_retention
        self._backend = backend
        self.owner = owner
        self.queues: list[str] = []  # the queues the run was asked to drain
        self.report = report
        self.run_id: int | None = None
        self._offset = 0.0  # the database's clock minus this host's
        self._started = time.time()
        self._flushed = time.monotonic()
        self._tallies: dict[str, _Tally] = {}
        #: (queue, ok, started (this host's clock), seconds, available_at) not tallied yet
        self._results: list[tuple[str, bool, float, float, datetime]] = []
        self._pending: dict[int, None] = {}  # the batch's ids without a result, in order
        self._since = 0.0  # when the first pending message started, at the latest
        self._running: int | None = None  # the id written as running
        self._running_since: float | None = None  # and since when (the database's clock)
        self._counted = time.monotonic()
        self._counts: tuple[int, int, int, int] = (0, 0, 0, 0)  # as written last
        self._warned = False
        self.reason: str | None = None  # why the run ended, once it has

    # -- the drain's hooks ------------------------------------------------------

    def batch(self, messages: list[Message], more: bool = False) -> None:
        """A batch goes to the runner: its first message starts now (``more``: it
        follows the one running). The run's row is written at its first batch, so
        `mq status` shows a live drain at once."""
        if more:
            self._pending.update(dict.fromkeys(m.id for m in messages))
            return
        self._pending = dict.fromkeys(m.id for m in messages)
        self._since = time.time()
        if self.enabled and self.run_id is None:
            self._start()

    def outcome(self, message: Message, outcome: Outcome) -> None:
        """One message's result, in memory (tick() writes what is due, after the
        drain has recorded the result: the drain's own errors come first)."""
        if not self.enabled:
            return
        self._pending.pop(message.id, None)
        now = time.time()
        if outcome.started:
            # Once per message: plain tests, not max() (~10 % of this method); the
            # message's datetime becomes seconds in _tally, when the slice is written.
            seconds = outcome.seconds
            if not (seconds is not None and seconds > 0.0):  # None, negative, NaN
                seconds = 0.0
            when = message.available_at
            self._results.append((message.queue, outcome.ok, now - seconds, seconds, when))
        if now > self._since:
            self._since = now

    def tick(self) -> None:
        """After each result, while a handler runs, while a --wait drain idles: the
        run's row, the running message and a slice, when due."""
        if not self.enabled:
            return
        # Called after every result: only cheap looks here, the tally when writing.
        if self._results and self.run_id is None and not self._start():
            return
        running = next(iter(self._pending), None)
        if running is not None and running != self._running:
            if time.time() - self._since >= RUNNING_AFTER:
                self.flush(running=running)
                return
        if self._running is not None and self._running not in self._pending:
            self.flush()  # the running message ended
        elif time.monotonic() - self._flushed >= SLICE_SECONDS:
            self.flush(running=self._running)
        elif self.run_id is not None and time.monotonic() - self._counted >= COUNTS_SECONDS:
            self._count()

    def _count(self) -> None:
        """The run's counts only, when they changed since they were written."""
        self._counted = time.monotonic()
        r = self.report
        counts = (r.claimed, r.succeeded, r.failed, r.returned)
        if counts == self._counts:
            return
        assert self.run_id is not None
        queue = r.queues[-1] if r.queues else None
        running = (self._running, self._running_since)
        update = (self.run_id, self._db_time(time.time()), queue, counts, running)
        if self._safely(lambda b: b.run_update(*update), "UPDATE", "runs"):
            self._counts = counts

    def _tally(self) -> None:
        for queue, ok, started, seconds, available_at in self._results:
            tally = self._tallies.get(queue)
            if tally is None:
                tally = self._tallies[queue] = _Tally(start=self._db_time(started))
            wait = max(self._db_time(started) - available_at.timestamp(), 0.0)
            if ok:
                tally.done += 1
            else:
                tally.failed += 1
            tally.wait.add(wait)
            tally.duration.add(seconds)
            tally.wait_sum += wait
            tally.duration_sum += seconds
        self._results = []

    def waiting(self) -> None:
        """A --wait drain found its queue empty and waits: its row is written now, so
        that `mq status` shows it and `mq stop` can reach it (a cron drain of an empty
        queue still writes nothing)."""
        if self.enabled and self.run_id is None:
            self._start()

    def end(self, error: BaseException | None, reason: str = "empty") -> None:
        """The run is over: its last slice, its counts, exit code and why (``reason``
        when no ``error`` ended it: `mq drain --json`'s "ended"); old runs deleted."""
        if not self.enabled or (self.run_id is None and not self._results):
            return  # nothing ran, nothing to say: a cron drain of an empty queue
        if error is not None:  # as loop.Drain.run says it (exit 0: a signal while waiting)
            stopped = getattr(error, "exit_code", 1) == 0
            reason = "database" if isinstance(error, DatabaseError) else "error"
            self.reason = "signal" if stopped else reason
        else:
            self.reason = reason
        code = 0 if error is None else int(getattr(error, "exit_code", 1))
        if isinstance(error, DatabaseError):
            self._warned = True  # the drain's own error says it all: no second one
        self._pending = {}
        if self.run_id is None and not self._start():
            return
        self._tally()
        if self.flush(exit_code=code) and self.retention > 0:
            before = self._db_time(time.time()) - self.retention
            self._safely(lambda b: b.runlog_purge(before), "DELETE", "rollup", "runs")

    # -- writing ------------------------------------------------------------------

    def flush(self, running: int | None = None, exit_code: int | None = None) -> bool:
        """Write the slices due and the run's row; False when that failed."""
        self._flushed = self._counted = time.monotonic()
        self._tally()
        if self.run_id is None and not self._start():
            return False
        assert self.run_id is not None
        run_id = self.run_id
        now = self._db_time(time.time())
        rows = [
            (run_id, queue, t.start, now, t.done, t.failed, None, t.wait_sum, t.duration_sum,
             t.wait.encode(), t.duration.encode())
            for queue, t in self._tallies.items()
        ]  # fmt: skip
        r = self.report
        counts = (r.claimed, r.succeeded, r.failed, r.returned)
        queue = r.queues[-1] if r.queues else None
        since = self._db_time(self._since) if running is not None else None
        ended = (now, exit_code, self.reason) if exit_code is not None else None

        if not self._safely(lambda b: b.rollup_add(rows), "INSERT", "rollup"):
            return False
        self._tallies = {}  # stored: a failed update below must not store them twice
        update = (run_id, now, queue, counts, (running, since), ended)
        if not self._safely(lambda b: b.run_update(*update), "UPDATE", "runs"):
            return False
        self._running, self._running_since, self._counts = running, since, counts
        return True

    def _start(self) -> bool:
        def start(backend: Backend) -> int:
            self._offset = backend.now().timestamp() - time.time()
            queue = (self.report.queues[-1:] or self.queues[:1] or [""])[0]
            host = socket.gethostname()
            at = self._db_time(self._started)
            return backend.run_start(self.owner(), host, os.getpid(), self.queues, queue, at)

        run_id = self._safely(start, "INSERT", "runs")
        if run_id is None:
            self.enabled = False  # no row to update: this run goes unrecorded
            return False
        self.run_id = run_id
        return True

    def _db_time(self, local: float) -> float:
        return local + self._offset

    def _safely(self, operation: Callable[[Backend], Any], privilege: str, *tables: str) -> Any:
        """``operation``, which needs ``privilege`` on the run log's ``tables``
        (``runs``, ``rollup``); None when it failed (said once per run)."""
        backend = self._backend()
        try:
            result = operation(backend)
        except Exception as exc:  # noqa: BLE001 - the run log must never fail a drain
            if self._warned:
                log.debug("run log: %s", exc)
            elif isinstance(exc, PermissionDenied):
                self._warned = True
                names = [f"{backend.table}_{name}" for name in tables]
                text = denied_text(privilege, [exc.table] if exc.table in names else names)
                try:  # without SELECT every write fails: say what the other commands say
                    unreadable = problem(backend)
                except MqError:
                    unreadable = None
                if isinstance(unreadable, PermissionDenied):
                    text = str(unreadable)
                log.warning("%s; the drain goes on, `mq status` will miss this run", text)
            else:
                self._warned = True
                log.warning(
                    "run log: could not record this drain run (%s); the drain goes on, "
                    "`mq status` will miss it (run `mq init` if a table is missing)",
                    exc,
                )
            return None
        return True if result is None else result
