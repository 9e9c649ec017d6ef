"""Recording what each handler run did: a success deleted (or grouped with others:
group_ack), a failure counted with its backoff or made failed, each guarded by
the drain's owner token; what could not be recorded after a database failure.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Any

from mq_cli.backends.base import Backend
from mq_cli.core import render
from mq_cli.core.config import QueueConfig
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import DatabaseError, SessionLost
from mq_cli.core.models import Message
from mq_cli.drain.lease import Lease
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.drain.runlog import RunLog
from mq_cli.drain.session import DrainSession
from mq_cli.runners import handlers
from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")

#: between two results, the drain's upkeep (tick: due heartbeats, a group's DELETE past
#: ack_delay, the run log) runs at most this often: after each of thousands of quick
#: results a second it would cost more than the results; the runner's wait ticks alike
TICK_BETWEEN_RESULTS = 0.002
ERROR_LOG_WIDTH = 1000  # characters of a failure's last line in the drain's log
GUARD_FIRED = (
    "killed: the drain could not renew the handler's lease (the drain was stopped, frozen "
    "or starved), so the handler was ended before another drain could take the message"
)


class Acknowledger:
    """The outcomes of a batch, recorded as they come: one part of the drain (loop.py
    composes them), over the session (what is held, the database) and the lease."""

    def __init__(
        self,
        session: DrainSession,
        lease: Lease,
        options: DrainOptions,
        report: DrainReport,
        runlog: RunLog,
    ) -> None:
        self.session = session
        self.lease = lease
        self.options = options
        self.report = report
        self.runlog = runlog
        self.done_since = 0.0  # time.monotonic() when the oldest of session.done succeeded
        # A heap of when (time.monotonic) the retries this drain recorded become ready.
        self.retries_due: list[float] = []
        # A success whose DELETE was sent and not yet read (PostgreSQL): the queue, the
        # message, its handler's seconds, when it was sent (time.monotonic) and the owner then.
        self._in_flight: tuple[QueueConfig, Message, float, float, str] | None = None
        self._sends_acks: bool | None = None  # the dialect's caps.sends_acks, once known
        session.on_let_go.append(self._forget_in_flight)

    def _forget_in_flight(self) -> None:
        if self._in_flight is not None:  # its DELETE may not have landed: processing, for gc
            self.session.left.add(self._in_flight[1].id)
        self._in_flight = None

    def settle_after_failure(
        self,
        queue: QueueConfig,
        batch: list[Message],
        runner: Runner,
        results: Any,
    ) -> None:
        """The database failed mid-batch: start nothing more, and find out what started.

        The worker may have run messages sent ahead whose results were not read
        yet. Giving those back would run them twice, so only what never started
        stays in ``held`` (to be returned); what ran stays `processing` under
        this drain's name, for gc, like the messages of a killed drain.
        """
        runner.stop()
        ran = 0
        try:
            for index, outcome in results:
                if outcome.started:
                    ran += 1
                    self.session.held.discard(batch[index].id)
                    self.session.left.add(batch[index].id)
        except Exception as exc:  # noqa: BLE001 - the database error is what is reported
            log.debug("while stopping after a database error: %s", exc)
            self.session.held.clear()  # unknown: return nothing that might have started
        self.report.unrecorded += ran
        if ran:
            log.warning(
                "queue %s: %d message(s) ran but their results could not be recorded; they "
                "stay processing until `mq gc --stalled --requeue` (or requeue_stalled) "
                "takes them back, and will run again",
                queue.name, ran,
            )  # fmt: skip

    def record_results(
        self, queue: QueueConfig, batch: list[Message], results: Any, tick: Callable[[], None]
    ) -> None:
        """Acknowledge each outcome as the runner yields it."""
        next_tick = 0.0
        # A success waits at most ack_delay for its group's DELETE (tick() sends it).
        gap = (
            min(TICK_BETWEEN_RESULTS, queue.ack_delay) if queue.group_ack else TICK_BETWEEN_RESULTS
        )
        for index, outcome in results:
            message = batch[index]
            # Handlers run in the batch's order: the next one runs now, if it started.
            following = batch[index + 1].id if index + 1 < len(batch) else None
            self.report.activity.run(following if following in self.session.held else None)
            if self.session.watchdog is not None and self.session.watchdog.fired:
                if outcome.started:
                    # It ran: it stays processing for gc, never given back as unstarted.
                    self.session.held.discard(message.id)
                    self.session.left.add(message.id)
                    self.report.unrecorded += 1
                raise SessionLost(self.session.session_lost_text("no proof of it"))
            self.runlog.outcome(message, outcome)
            if not outcome.started:
                if message.id not in self.session.held:
                    # Lost while this drain was paused (SIGSTOP, a frozen VM, a cut
                    # link) past stalled_after: gc or another drain has it now.
                    log.warning(
                        "queue %s: message %d is no longer held by this drain (paused "
                        "past stalled_after?); skipped", queue.name, message.id,
                    )  # fmt: skip
                continue
            self.session.held.discard(message.id)
            if outcome.started and not outcome.ok and self.lease.guard.fired():
                outcome = handlers.Outcome(ok=False, error=GUARD_FIRED)
            if self.session.signals > 1 and not outcome.ok:
                outcome = handlers.Outcome(ok=False, error="interrupted: the drain was stopped")
            if outcome.ok and self._deferrable(queue, message):
                self.report.succeeded += 1
                if not self.session.done:
                    self.done_since = time.monotonic()
                self.session.done.append(message)
            else:
                counted = self.report.succeeded + self.report.failed
                try:
                    self._acknowledge(queue, message, outcome)
                except DatabaseError:
                    self.session.left.add(message.id)  # its result may not have landed
                    if self.report.succeeded + self.report.failed == counted:
                        # It ran, and failed before its own acknowledgement went out
                        # (the one before it in flight could not be read).
                        self.report.unrecorded += 1
                    raise
            if self.options.progress is not None:
                self.options.progress(self.report)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + gap
                tick()
        self.finish_in_flight()

    @staticmethod
    def _deferrable(queue: QueueConfig, message: Message) -> bool:
        # A tombstone (unique_retention) needs its own UPDATE; everything else can
        # wait for the batch's one DELETE.
        return queue.group_ack and not (queue.unique_retention > 0 and message.unique_key)

    def acknowledge_group(self, queue: QueueConfig) -> None:
        """One DELETE for the successes so far: at the batch's end, or once the oldest has
        waited ack_delay. A crash before it re-runs them (at most a batch, at most
        ack_delay old but for the DELETE's own time)."""
        ids = [m.id for m in self.session.done]
        self.group_acknowledged(
            queue, ids, self.session.db(lambda b: b.ack_success_many(ids, self.session.owner))
        )

    def group_acknowledged(
        self, queue: QueueConfig, ids: list[int], deleted: int, clear: bool = True
    ) -> None:
        """The group's DELETE committed (on its own, or with the next claim): ``deleted``
        of ``ids`` were still this drain's (``clear``: they are the drain's successes
        so far; a claim sent ahead took its group out of them when it went)."""
        if clear:
            self.session.done = []
        log.info("queue %s: %d message(s) done (one acknowledgement)", queue.name, deleted)
        if deleted < len(ids):
            self.report.lost += len(ids) - deleted
            log.warning(
                "queue %s: %d succeeded message(s) were no longer held by this drain "
                "(requeued by an operator or gc?)",
                queue.name, len(ids) - deleted,
            )  # fmt: skip
            self.lease.taken_while_stalled(self.lease.beat_at)

    def finish_in_flight(self, older_than: float = 0.0) -> None:
        """Read the result of the success sent last (if sent over ``older_than`` s ago)."""
        if self._in_flight is None:
            return
        queue, message, seconds, sent_at, owner = self._in_flight
        if time.monotonic() - sent_at < older_than:
            return
        self._in_flight = None
        # Sent on a session that broke (while sending or since), the DELETE runs again
        # and matches nothing if the first landed: when it matched nothing, the row tells.
        try:
            ours = self._ack(
                lambda b: b.ack_success_collect(message, owner, queue.unique_retention),
                lambda after: after is None or after.status == "done",
                message,
                maybe_landed=True,
            )
        except DatabaseError:
            self.session.left.add(message.id)  # its DELETE may not have landed
            raise
        if ours:
            log.info("queue %s: message %d done in %.3fs", queue.name, message.id, seconds)
        else:
            self._lost(queue, message)

    def _acknowledge(self, queue: QueueConfig, message: Message, outcome: handlers.Outcome) -> None:
        self.finish_in_flight()
        if outcome.ok:
            self.report.succeeded += 1
            # Where the dialect can, the DELETE goes out now and its result is read
            # at the next result, so the drain's work on that one overlaps the commit.
            owner = self.session.owner
            if self._sends_acks is None:
                self._sends_acks = bool(self.session.db(lambda b: b.caps.sends_acks))
            if self._sends_acks and self.session.db(
                lambda b: b.ack_success_send(message, owner, queue.unique_retention)
            ):
                seconds = outcome.seconds or 0.0
                self._in_flight = (queue, message, seconds, time.monotonic(), owner)
                return
            ours = self._ack(
                lambda b: b.ack_success(message, self.session.owner, queue.unique_retention),
                lambda after: after is None or after.status == "done",
                message,
            )
            if ours:
                log.info(
                    "queue %s: message %d done in %.3fs",
                    queue.name, message.id, outcome.seconds or 0.0,
                )  # fmt: skip
        else:
            self.report.failed += 1
            attempts = message.error_count + 1
            final = attempts >= queue.max_errors
            retry_in = 0.0 if final else queue.backoff(attempts)
            error = outcome.error or "failed"
            ours = self._ack(
                lambda b: b.ack_failure(message, self.session.owner, error, retry_in, final),
                lambda after: (
                    after is not None
                    and after.owner is None
                    and after.error_count == message.error_count + 1
                ),
                message,
            )
            if ours:
                due = time.monotonic() + retry_in
                # This drain runs the retry only if it is still waiting then.
                by_this = self.options.wait and (
                    self.session.deadline is None or due < self.session.deadline
                )
                if not final and by_this:
                    heapq.heappush(self.retries_due, due)
                first_line = render.error_line(error, ERROR_LOG_WIDTH)
                if final:
                    log.error(
                        "queue %s: message %d failed for good after %d attempt(s): %s",
                        queue.name, message.id, attempts, first_line,
                    )  # fmt: skip
                else:
                    # quiet_retries: cron (which mails what is logged) hears only of
                    # messages that failed for good; -v still shows each attempt.
                    log.log(
                        logging.INFO if queue.quiet_retries else logging.ERROR,
                        "queue %s: message %d failed (attempt %d of %d, %s): %s",
                        queue.name, message.id, attempts, queue.max_errors,
                        _when_retried(retry_in, by_this), first_line,
                    )  # fmt: skip
        if not ours:
            self._lost(queue, message)

    def _lost(self, queue: QueueConfig, message: Message) -> None:
        self.report.lost += 1
        log.warning(
            "queue %s: message %d was no longer held by this drain (requeued by an operator "
            "or gc?); its result was not recorded",
            queue.name, message.id,
        )  # fmt: skip

    def _ack(
        self,
        change: Callable[[Backend], bool],
        landed: Callable[[Message | None], bool],
        message: Message,
        maybe_landed: bool = False,
    ) -> bool:
        """Run an acknowledgement; True when it took effect.

        If the connection dropped, the first try may have committed with its
        reply lost, and the retry then matches nothing: ``landed`` tells from
        the row as it is now whether that first try did the job (as it does after
        any miss when ``maybe_landed``: a DELETE sent ahead, see finish_in_flight).
        """
        tries = 0
        reconnects = self.session.reconnects

        def attempt(backend: Backend) -> bool:
            nonlocal tries
            tries += 1
            return change(backend)

        ours = self.session.db(attempt)
        if not ours and (tries > 1 or maybe_landed):
            ours = landed(self.session.db(lambda b: b.get_message(message.id)))
        if not ours and self.session.reconnects != reconnects and self.session.live == "session":
            # Cut off mid-acknowledgement, its lock free meanwhile: gc took what it
            # held, as _take_back finds for the messages still in hand. Stop alike.
            raise SessionLost(self.session.session_lost_text("gc took a message it held"))
        if not ours:
            self.lease.taken_while_stalled(self.lease.beat_at)
        return bool(ours)


def _when_retried(retry_in: float, by_this: bool) -> str:
    """When a failed message runs again, truly: under cron a plain drain has ended by
    then, and the retry waits for the next run of the crontab line."""
    if by_this:
        return f"retry in {format_duration(retry_in)}, by this drain"
    at = time.strftime("%H:%M:%S", time.localtime(time.time() + retry_in))
    return f"retry in {format_duration(retry_in)}: by the first drain that runs after {at}"
