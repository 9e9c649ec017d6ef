"""The drain: claim ready messages, run the handler on each, acknowledge each result.

One drain process works one queue at a time under a per-host slot. It is
single-threaded: while a handler runs, the runner calls back (`tick`) so the
drain refreshes the heartbeat of every message it holds on its own connection.

:class:`Drain` is the loop; the work is done by parts, each with its own state,
that it builds and passes messages between: the session (session.py: the
connection, the owner token, what is held), the lease (lease.py: liveness, the
lease, the watchdog and the guard), the claimer (claimer.py), the batch runner
(running.py), the acknowledger (acks.py) and the waiting (waiting.py).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

from mq_cli.backends.base import Backend
from mq_cli.core.config import Config, QueueConfig
from mq_cli.core.errors import DatabaseError, MqError, SessionLost
from mq_cli.drain import signals, startfail, waiting
from mq_cli.drain.acks import Acknowledger
from mq_cli.drain.claimer import Claimer
from mq_cli.drain.launcher import Launcher
from mq_cli.drain.lease import Lease
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.drain.requests import Requests
from mq_cli.drain.runlog import RunLog
from mq_cli.drain.running import BatchRunner
from mq_cli.drain.session import DatabaseAway, DrainSession, WaitInterrupted
from mq_cli.host import slots
from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")

PAUSE_LOOK_EVERY = 2.0  # a running drain looks whether its queue was paused


class Drain:
    """One drain run: its queues one after another, each in batches."""

    def __init__(self, config: Config, backend: Callable[[], Backend], options: DrainOptions):
        self.config = config
        self.options = options
        self.report = DrainReport()
        self.session = session = DrainSession(config, backend, options)
        self.runner: Runner | None = None  # the queue's, while it is drained
        self.launcher = Launcher(config)
        self.runlog = RunLog(config, lambda: session.backend, lambda: session.owner, self.report)
        self.lease = Lease(config, session, lambda: self.runner)
        self.requests = Requests(session, self.runlog, lambda: self.runner, self.report, self.lease)
        self.acks = Acknowledger(session, self.lease, options, self.report, self.runlog)
        self.claimer = Claimer(session, self.lease, self.acks, options, self.report)
        self.batches = BatchRunner(
            session, self.lease, self.acks, self.report, self.runlog, self._should_stop,
            self._ticks, self.claimer, lambda: not self._should_stop(quiet=False),
        )  # fmt: skip
        self.waiting = waiting.Waiting(
            config, session, self.acks, options, self.report, self._ticks
        )
        self.stop_reason = ""  # why _should_stop first said yes (a quiet request: last)

    # -- the run ------------------------------------------------------------

    def run(self) -> DrainReport:
        """Drain; the report says what ran and why the run ended (``ended``), also when
        an error ends it: then it is the error's ``report``."""
        try:
            self._run()
        except WaitInterrupted as exc:  # ends as any signal does: nothing was held
            log.info("%s", exc)
            self.stop_reason = "signal"
        except MqError as exc:
            ended = getattr(exc, "ended", "database")  # StoppedWhileAway: "signal", exit 3
            self.report.ended = ended if isinstance(exc, DatabaseError) else "error"
            exc.report = self.report
            self.report.for_gc = self.session.leave_for_gc(exc)
            raise
        self.report.ended = self.stop_reason or "empty"
        self.report.for_gc = self.session.leave_for_gc()
        return self.report

    def _run(self) -> None:
        started = time.monotonic()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in signals.STOP_SIGNALS}
        early = signals.caught(previous.values())
        if early:
            log.warning("got %s while starting: stopping before claiming anything", early.name)
            self.session.signals += 1
        try:
            plan = startfail.plan(self.config, self.options, self.session.open_backend)
            self.runlog.queues = [queue.name for queue, _ in plan]
            if plan and not early:
                self.launcher.launch(*plan[0])  # its child's Python starts while we connect
            if self.options.max_seconds:
                self.session.deadline = started + self.options.max_seconds
            slot_dir = slots.open_database_dir(self.config)  # this database and table's only
            paused, stuck = self.session.db(lambda b: b.drain_notes())
            if stuck.keys() & set(self.runlog.queues):  # these can start again: no note
                startfail.clear(self.session.db, stuck.keys() & set(self.runlog.queues))
            self.lease.take_liveness()
            for queue, path in plan:
                if self._should_stop():
                    break
                if queue.name in paused:
                    log.info(
                        "queue %s: paused since %s (mq resume)", queue.name, paused[queue.name]
                    )
                    self.report.paused.append(queue.name)
                    continue
                concurrency = self.options.concurrency or queue.concurrency
                ends_at = None
                if self.session.deadline is not None:
                    ends_at = time.time() + self.session.deadline - time.monotonic()
                slot = slots.take(slot_dir, queue.name, concurrency, ends_at, self._should_stop)
                fleet_slot = slot is not None and self.session.fleet.take(queue)
                if slot is None or not fleet_slot:  # the host's, then the fleet's
                    if slot is not None:
                        slot.release()
                    self.report.busy.append(queue.name)
                    continue
                try:
                    self.report.queues.append(queue.name)
                    self._drain_queue(queue, path)
                except DatabaseError as exc:
                    raise self.session.with_recovery_hint(exc) from exc
                finally:
                    self.session.fleet.release()
                    slot.release()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.launcher.close()
            self.lease.close()
            self.report.seconds = time.monotonic() - started
            self.runlog.end(sys.exc_info()[1], self.stop_reason or "empty")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        session, name = self.session, signal.Signals(signum).name
        session.signals += 1
        if session.signals == 1:
            away = session.outage.since is not None and session.holding()
            signals.say_stopping(name, session.in_hand, self.report.activity.running, away)
            if self.runner is not None:
                self.runner.stop()
        elif self.runner is not None:
            log.warning("got a second signal: stopping the running handler now")
            self.runner.kill()

    def _should_stop(self, quiet: bool = True) -> bool:
        """Claim no more and end? (``quiet`` False: may a claimed one not start? requests.py)"""
        limit = self.options.max_messages
        if self.requests.kind == "stop":
            reason = "stop"
        elif self.session.signals:
            reason = "signal"
        elif self.session.fleet.lost:
            reason = "database"  # another drain took its fleet slot while it was cut off
        elif self.session.deadline is not None and time.monotonic() >= self.session.deadline:
            reason = "deadline"
        elif limit is not None and self.report.succeeded + self.report.failed >= limit:
            reason = "max_messages"
        elif quiet and self.requests.kind == "quiet":
            reason = "quiet"
        else:
            return False
        self.stop_reason = reason if self.stop_reason in ("", "quiet") else self.stop_reason
        return True

    def _drain_queue(self, queue: QueueConfig, path: str) -> None:
        self.session.where = f"queue {queue.name}: "
        self.report.activity.queue = queue.name
        self.session.db(lambda b: b.purge_tombstones(queue.name))
        self.waiting.begin(queue)
        runner = self.launcher.runner(queue, path)
        self.runner = runner
        waiter = self.waiting.waiter(queue) if self.options.wait else None
        self.acks.retries_due = []
        try:
            # A cron drain's child imports the handler at the first batch (an empty queue
            # costs no second import); a waiting drain's imports now, before it is woken.
            if waiter is not None:
                runner.start()
            idle = waiting.WAIT_POLL_MIN
            looked = time.monotonic()

            def may_claim_ahead() -> bool:
                # Not where the loop must look first: a pause, its end, tokens, --max-messages.
                due = time.monotonic() - looked >= PAUSE_LOOK_EVERY
                limited = queue.rate_limit is not None or self.options.max_messages is not None
                return queue.group_ack and not due and not limited and not self._should_stop()

            while not self._should_stop():
                if time.monotonic() - looked >= PAUSE_LOOK_EVERY:
                    # A long (--wait) drain learns of `mq pause` too, within seconds,
                    # at one query per few seconds, not one per batch.
                    looked = time.monotonic()
                    if queue.name in self.session.db(lambda b: b.paused()):
                        log.info("queue %s: paused (mq pause); stopping", queue.name)
                        self.report.paused.append(queue.name)
                        return
                try:
                    batch = self.claimer.claim(queue)
                except (SessionLost, DatabaseAway) as exc:  # with a group's successes
                    if not self.session.go_on_after(exc):
                        raise
                    continue
                throttle = self.claimer.throttle
                if not batch and throttle.due_in is not None:  # ready, but no token yet
                    wait, stop = self.options.wait, self._should_stop
                    if throttle.wait(queue, self.session.deadline, wait, stop, self._ticks):
                        continue
                    return
                if not batch:
                    if not self.options.wait:
                        return
                    self.runlog.waiting()  # `mq status` shows it, `mq stop` reaches it
                    idle = self.waiting.idle(self.waiting.look_for_stalled(queue, idle), waiter)
                    continue
                idle = waiting.WAIT_POLL_MIN
                try:
                    self.batches.run(queue, batch, runner, may_claim_ahead)
                except (SessionLost, DatabaseAway) as exc:
                    if not self.session.go_on_after(exc):
                        raise
        finally:
            try:
                if self.session.done:  # carried to a claim that did not come (paused, stopped)
                    self.acks.acknowledge_group(queue)
            finally:
                self.runner = None
                runner.close()
                if waiter is not None:
                    waiter.close()

    def _ticks(self) -> None:
        """Often, whatever the drain does: the run log's and the fleet slot's upkeep,
        and a terminal's status line."""
        self.runlog.tick()
        self.session.fleet.keep()
        self.requests.tick()  # an operator's `mq stop`
        if self.options.progress is not None:
            self.options.progress(self.report)
