"""Running a claimed batch: the runner gets the messages, starts each only while
the drain may (its lease, its fence, its end), and calls back often (`tick`) so
the drain heartbeats what it holds, reads a success sent ahead and deletes a
group that waited ack_delay; each result goes to the acknowledger as it comes,
and what never started goes back to ready.

One part of the drain (loop.py composes them).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import closing

from mq_cli.backends import liveness
from mq_cli.core.config import QueueConfig
from mq_cli.core.errors import DatabaseError, SessionLost
from mq_cli.core.models import Message
from mq_cli.drain.acks import Acknowledger
from mq_cli.drain.claimer import Claimer
from mq_cli.drain.lease import Lease
from mq_cli.drain.report import DrainReport
from mq_cli.drain.runlog import RunLog
from mq_cli.drain.session import DrainSession
from mq_cli.runners import handlers
from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")

#: a success's DELETE sent ahead is read by the next result, or by a tick this much later
IN_FLIGHT_READ_AFTER = 0.05


class BatchRunner:
    """Runs one batch after another for the drain. ``should_stop``: the drain's own
    test (a signal, its end, --max-messages, a request); ``may_start``: whether a
    claimed message may start; ``ticks``: its upkeep while it works."""

    def __init__(
        self,
        session: DrainSession,
        lease: Lease,
        acks: Acknowledger,
        report: DrainReport,
        runlog: RunLog,
        should_stop: Callable[[], bool],
        ticks: Callable[[], None],
        claimer: Claimer,
        may_start: Callable[[], bool] | None = None,
    ) -> None:
        self.claimer = claimer
        # A quiet request (requests.py) claims nothing more, yet starts what it claimed.
        self._may_start = may_start or (lambda: not should_stop())
        self.session = session
        self.lease = lease
        self.acks = acks
        self.report = report
        self.runlog = runlog
        self._should_stop = should_stop
        self._ticks = ticks

    def run(
        self,
        queue: QueueConfig,
        batch: list[Message],
        runner: Runner,
        may_claim_ahead: Callable[[], bool] = lambda: False,
    ) -> None:
        """Run ``batch``, and where ``may_claim_ahead()`` (group_ack on PostgreSQL and
        MariaDB), the batches claimed while the one before runs (claimer.send_ahead)."""
        session, lease, acks, claimer = self.session, self.lease, self.acks, self.claimer
        # At least once a second: the run log learns which message runs for long.
        tick_every = max(min(queue.stalled_after / 3, 1.0), 0.05)
        beat_every = queue.stalled_after / 3
        fenced = session.live == "session"
        if fenced:
            tick_every = min(tick_every, liveness.PROBE_EVERY)
        lease.last_beat = time.monotonic()

        if queue.group_ack:
            # A success waits at most ack_delay for its group's DELETE, even while
            # the next handler runs for minutes: the runner's wait loop ticks that often.
            tick_every = min(tick_every, max(queue.ack_delay, 0.001))

        def tick() -> None:
            if session.done and time.monotonic() - acks.done_since >= queue.ack_delay:
                acks.acknowledge_group(queue)
            # A success sent while the next handler runs long: its result is read
            # (and logged) now, not when that handler ends.
            acks.finish_in_flight(older_than=IN_FLIGHT_READ_AFTER)
            claimer.settle_ahead(older_than=IN_FLIGHT_READ_AFTER)
            if time.monotonic() - lease.last_beat >= beat_every:
                lease.heartbeat()
            elif fenced and time.monotonic() - session.last_proof >= liveness.PROBE_EVERY:
                session.db(lambda b: b.probe())
            self._ticks()

        def admit(index: int) -> bool:
            if time.monotonic() >= lease.until:
                # Paused (SIGSTOP, a frozen VM) or the database away: renew before
                # starting anything, or learn that gc took it.
                lease.heartbeat()
            elif fenced and time.monotonic() - session.last_proof >= liveness.PROBE_EVERY:
                session.db(lambda b: b.probe())
            # Nothing more starts once the fence fired: the batch ends at its next result.
            fenced_off = session.watchdog is not None and session.watchdog.fired
            return batch[index].id in session.held and self._may_start() and not fenced_off

        def not_after() -> float:
            # The worker may start a message sent ahead only before this: if this
            # drain freezes, what it sent must not run once gc may requeue it; nor,
            # with a session lock, once the fence would stop it.
            proof = session.last_proof + liveness.FENCE if fenced else math.inf
            return min(lease.until, proof, session.deadline or math.inf)

        def job(m: Message) -> handlers.Job:
            return m.payload or b"", handlers.MessageInfo(
                m.id, m.queue, m.error_count, m.created_at
            )

        failed_ahead: list[DatabaseError] = []

        def ending_soon() -> None:
            # This batch will be done within milliseconds: the next claim goes now and
            # is read once its results are recorded (more()), so that the server works
            # on it while the drain and the child work on this one.
            if claimer.ahead is None and may_claim_ahead():
                try:
                    claimer.send_ahead(queue)
                except SessionLost:
                    raise  # gc may take what runs now: the runner kills it on the way out
                except DatabaseError as exc:  # this batch ends first, recorded if it can be
                    failed_ahead.append(exc)

        def more() -> int:
            if claimer.ahead is None or failed_ahead or self._should_stop():
                return 0
            added = claimer.collect_ahead(queue)
            batch.extend(added)
            jobs.extend(map(job, added))
            self.runlog.batch(added, more=True)
            return len(added)

        jobs = list(map(job, batch))
        self.runlog.batch(batch)
        self.report.activity.run(batch[0].id)
        session.in_hand = True  # held until its results are recorded (session.py: holding)
        carry = False
        results = runner.run_many(
            jobs, admit, queue.timeout or None, tick, tick_every, not_after, ending_soon, more
        )
        lease.arm()
        try:
            # closing: a handler still running when we leave early is killed
            # before its message is given back below.
            with closing(results):
                try:
                    acks.record_results(queue, batch, results, tick)
                    if failed_ahead:
                        raise failed_ahead[0]
                except DatabaseError as exc:
                    if isinstance(exc, SessionLost):
                        runner.kill()  # it may be running a message gc can take now
                    acks.settle_after_failure(queue, batch, runner, results)
                    raise
            # group_ack: the successes left go with the next claim, one commit for
            # both (claimer.py), unless this drain stops here.
            carry = not self._should_stop()
        finally:
            lease.disarm()
            if claimer.ahead is not None:  # stopped, or failed: what it took goes back
                self._abandon_ahead(queue)
            try:
                if session.done and not carry:
                    acks.acknowledge_group(queue)
            finally:
                if session.held:
                    held = sorted(session.held)
                    returned = session.db(lambda b: b.release(held, session.owner))
                    self.report.returned += returned
                    log.info(
                        "queue %s: returned %d unstarted message(s) to ready", queue.name, returned
                    )
                    session.held = set()
        session.in_hand = False
        self.report.activity.run(None)

    def _abandon_ahead(self, queue: QueueConfig) -> None:
        """Read the claim sent ahead, so that what it took is returned with the unstarted."""
        try:
            self.claimer.collect_ahead(queue)
        except DatabaseError as exc:
            self.claimer.ahead = None
            log.warning(
                "queue %s: a claim made ahead could not be read (%s): what it took, if "
                "anything, stays processing until `mq gc --stalled --requeue` takes it back",
                queue.name, exc,
            )  # fmt: skip
