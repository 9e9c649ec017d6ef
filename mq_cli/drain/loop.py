"""The drain: claim ready messages, run the handler on each, acknowledge each result.

One drain process works one queue at a time under a per-host slot. It is
single-threaded: while a handler runs, the runner calls back (`tick`) so the
drain refreshes the heartbeat of every message it holds on its own connection.
"""

from __future__ import annotations

import heapq
import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from contextlib import closing
from types import FrameType

from mq_cli.backends import liveness
from mq_cli.backends.base import Backend
from mq_cli.core.config import Config, QueueConfig
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import (
    DatabaseError,
    MqError,
    SessionLost,
)
from mq_cli.core.models import Message
from mq_cli.drain import clock, ratelimit, signals, slots, startfail, wakeup, watchdog
from mq_cli.drain.acks import DrainAcks
from mq_cli.drain.recovery import requeue_stalled
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.drain.session import DatabaseAway, WaitInterrupted
from mq_cli.runners import handlers, make_runner

log = logging.getLogger("mq")

WAIT_POLL_MIN = 0.05
WAIT_POLL_MAX = 1.0  # the contract: --wait polls at least once a second
PAUSE_LOOK_EVERY = 2.0  # a running drain looks whether its queue was paused
REQUEUE_LOOK_EVERY = 0.5  # a waiting requeue_stalled drain looks for dead drains' messages
# A retry becomes ready at the database's `now` + its backoff, stored to the
# millisecond: a waiting drain looks that much after the moment it computed.
RETRY_SLACK = 0.005
#: a success's DELETE sent ahead is read by the next result, or by a tick this much later
IN_FLIGHT_READ_AFTER = 0.05


class Drain(DrainAcks):
    """One drain run: its queues one after another, each in batches (acks.py records
    the outcomes, session.py keeps the database connection)."""

    def __init__(self, config: Config, backend: Callable[[], Backend], options: DrainOptions):
        super().__init__(config, backend, options)
        self.runner: handlers.Runner | None = None
        # Until when (time.monotonic) no gc can take what this drain holds:
        # half of stalled_after after the last claim or heartbeat that covered it.
        self.lease_until = 0.0
        self._lease_for = 0.0  # stalled_after / 2 of the queue being drained
        # The running handler's lease (guard.py) ends at the latest this long after
        # the claim or heartbeat that last covered it: before gc could take it.
        self._hold_for = 0.0
        self._file_lock: liveness.FileLock | None = None
        self._suspects: dict[str, float] = {}  # owner -> since when its lock is free
        self.throttle = ratelimit.Throttle()
        self.stop_reason = ""  # why _should_stop first said yes: the report's "ended"

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
            self.report.ended = "database" if isinstance(exc, DatabaseError) else "error"
            exc.report = self.report
            raise
        self.report.ended = self.stop_reason or "empty"
        return self.report

    def _run(self) -> None:
        started = time.monotonic()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        early = signals.caught(previous.values())
        if early:
            log.warning("got %s while starting: stopping before claiming anything", early.name)
            self.signals += 1
        try:
            plan = startfail.plan(self.config, self.options, self._open_backend)
            self.runlog.queues = [queue.name for queue, _ in plan]
            if self.options.max_seconds:
                self.deadline = started + self.options.max_seconds
            # This database's and table's slots: never another config's (slots.py).
            slot_dir = slots.open_database_dir(self.config)
            paused, stuck = self._db(lambda b: b.drain_notes())
            if stuck.keys() & set(self.runlog.queues):  # these can start again: no note
                startfail.clear(self._db, stuck.keys() & set(self.runlog.queues))
            self._take_liveness()
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
                if self.deadline is not None:
                    ends_at = time.time() + self.deadline - time.monotonic()
                slot = slots.acquire(slot_dir, queue.name, concurrency, ends_at)
                if slot is None:  # one may end now: cron's next run of the line
                    slot = slots.take_over(
                        slot_dir, queue.name, concurrency, ends_at, self._should_stop
                    )
                    if slot is not None:
                        log.info("queue %s: took over a slot from a drain that ended", queue.name)
                if slot is None or not self.fleet.take(queue):  # the host's, then the fleet's
                    if slot is None:
                        log.info(
                            "queue %s: all %d slot(s) busy on this host", queue.name, concurrency
                        )
                    else:
                        slot.release()
                    self.report.busy.append(queue.name)
                    continue
                try:
                    self.report.queues.append(queue.name)
                    self._drain_queue(queue, path)
                except DatabaseError as exc:
                    raise self._with_recovery_hint(exc) from exc
                finally:
                    self.fleet.release()
                    slot.release()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.watchdog is not None:
                self.watchdog.close()
            self.guard.close()
            if self._file_lock is not None:
                self._file_lock.release()
            self.report.seconds = time.monotonic() - started
            self.runlog.end(sys.exc_info()[1])

    def _take_liveness(self) -> None:
        """Hold a lock named after this drain's owner token for as long as it runs, and
        mark the token so gc knows to look at it (liveness.py); start the watchdog."""
        token = self.owner + liveness.LIVE_MARK
        if self.backend.caps.file_locks:
            try:
                self._file_lock = liveness.FileLock(self.config.lock_dir, token)
                self.owner, self.live = token, "file"
            except OSError as exc:
                log.info("no drain lock file (%s): heartbeats alone show this drain alive", exc)
        elif self._db(lambda b: b.live_lock_take(token)):
            self.owner, self.live = token, "session"
        fence = liveness.FENCE if self.live == "session" else None
        self.watchdog = watchdog.Watchdog(
            lambda: self.last_proof, self._fence, fence=fence, keep=self._keep
        )

    def _keep(self, now: float) -> None:
        # The watchdog's thread: the running handler may go on FENCE seconds past
        # this sign of life, and never past the time gc could take its message.
        self.guard.renew(min(now + liveness.FENCE, self.beat_at + self._hold_for))

    def _fence(self) -> None:
        # The watchdog's thread: only a signal to the handler, nothing else.
        runner = self.runner
        if runner is not None:
            runner.kill()

    def _with_recovery_hint(self, exc: DatabaseError) -> DatabaseError:
        """The error, saying what becomes of what this drain held (a full disk, a
        refused write: its messages could not be recorded or given back)."""
        text = str(exc)
        if not self._holding() or "gc --stalled" in text or "\n" in text:
            return exc  # nothing held, said already, or two lines already
        return type(exc)(
            f"{text}\nany message this drain held stays processing and shows as stalled "
            "after stalled_after; `mq gc --stalled --requeue` recovers them"
        )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            if not self.in_hand:
                # Waiting, claiming, starting: nothing to finish. Stopping as asked is
                # no news for cron's mail (`timeout` under cron sends this every run).
                log.info("got %s: stopping; no handler was running", name)
            else:
                running = self.report.activity.running
                log.warning(
                    "got %s: %s, then returning this drain's unstarted messages to ready "
                    "(a second signal stops the handler at once)",
                    name,
                    f"letting message {running}'s handler finish"
                    if running is not None
                    else "letting the running handler finish",
                )
            if self.runner is not None:
                self.runner.stop()
        elif self.runner is not None:
            log.warning("got a second signal: stopping the running handler now")
            self.runner.kill()

    def _should_stop(self) -> bool:
        limit = self.options.max_messages
        if self.signals:
            reason = "signal"
        elif self.fleet.lost:
            reason = "database"  # another drain took its fleet slot while it was cut off
        elif self.deadline is not None and time.monotonic() >= self.deadline:
            reason = "deadline"
        elif limit is not None and self.report.succeeded + self.report.failed >= limit:
            reason = "max_messages"
        else:
            return False
        self.stop_reason = self.stop_reason or reason
        return True

    def _drain_queue(self, queue: QueueConfig, path: str) -> None:
        self.where = f"queue {queue.name}: "
        self.report.activity.queue = queue.name
        self._db(lambda b: b.purge_tombstones(queue.name))
        requeued = time.monotonic()
        if queue.requeue_stalled:
            self._requeue_stalled(queue)  # records the clock first
        else:
            clock.observe_quietly(self.backend)  # keeps this host's clock record fresh
        runner = make_runner(path, queue.format, self.config.database.secret_env())
        self.runner = runner
        waiter = self._waiter(queue) if self.options.wait else None
        self.retries_due = []
        try:
            # A cron drain does not start the runner: a Python handler's child
            # starts with the first batch, so an empty queue costs no second
            # process. A waiting drain starts it now: the first message it is
            # woken for should not wait ~100 ms for an interpreter.
            if waiter is not None:
                runner.start()
            idle = WAIT_POLL_MIN
            looked = time.monotonic()
            while not self._should_stop():
                if time.monotonic() - looked >= PAUSE_LOOK_EVERY:
                    # A long (--wait) drain learns of `mq pause` too, within seconds,
                    # at one query per few seconds, not one per batch.
                    looked = time.monotonic()
                    if queue.name in self._db(lambda b: b.paused()):
                        log.info("queue %s: paused (mq pause); stopping", queue.name)
                        self.report.paused.append(queue.name)
                        return
                try:
                    batch = self._claim(queue)
                except (SessionLost, DatabaseAway) as exc:  # with a group's successes
                    if not self._go_on_after(exc):
                        raise
                    continue
                if not batch and self.throttle.due_in is not None:  # ready, but no token yet
                    wait, stop = self.options.wait, self._should_stop
                    if self.throttle.wait(queue, self.deadline, wait, stop, self._ticks):
                        continue
                    return
                if not batch:
                    if not self.options.wait:
                        return
                    if queue.requeue_stalled and time.monotonic() - requeued >= REQUEUE_LOOK_EVERY:
                        # A dead drain's messages come back within seconds, not at
                        # this drain's next start.
                        requeued = time.monotonic()
                        if self._requeue_stalled(queue) or self._suspects:
                            # Ready after liveness.GRACE, or a lock under watch: look often.
                            idle = min(idle, REQUEUE_LOOK_EVERY)
                    idle = self._idle(idle, waiter)
                    continue
                idle = WAIT_POLL_MIN
                try:
                    self._run_batch(queue, batch, runner)
                except (SessionLost, DatabaseAway) as exc:
                    if not self._go_on_after(exc):
                        raise
        finally:
            try:
                if self.done:  # carried to a claim that did not come (paused, stopped)
                    self._acknowledge_group(queue)
            finally:
                self.runner = None
                runner.close()
                if waiter is not None:
                    waiter.close()

    def _ticks(self) -> None:
        """Often, whatever the drain does: the run log's and the fleet slot's upkeep,
        and a terminal's status line."""
        self.runlog.tick()
        self.fleet.keep()
        if self.options.progress is not None:
            self.options.progress(self.report)

    def _waiter(self, queue: QueueConfig) -> wakeup.Waiter | None:
        try:
            return wakeup.Waiter(slots.database_dir(self.config), queue.name, self.backend)
        except (OSError, MqError) as exc:  # then it polls, as without one
            log.info("queue %s: no wake-up on enqueue (%s); polling", queue.name, exc)
            return None

    def _requeue_stalled(self, queue: QueueConfig) -> int:
        """`requeue_stalled: true`: what `mq gc --stalled --requeue -q QUEUE` would do."""
        # A waiting drain remembers since when a drain's lock is free, and does
        # not wait for it; a cron drain's one look waits (liveness.SUSPECT).
        suspects = self._suspects if self.options.wait else None
        changed, failed = self._db(lambda b: requeue_stalled(b, queue, suspects))
        if changed:
            # Worth a mail from cron: a drain died holding these.
            log.warning(
                "queue %s: requeued %d stalled message(s) (their drain's lock was free, or no "
                "heartbeat for over %s: it died?)%s",
                queue.name, changed, format_duration(queue.stalled_after),
                f"; {failed} reached max_errors and are now failed" if failed else "",
            )  # fmt: skip
        return int(changed)

    def _idle(self, pause: float, waiter: wakeup.Waiter | None) -> float:
        """Wait before polling again with --wait: short at first, growing to a second;
        an enqueue on this host ends the wait at once."""
        due, now = (self.retries_due[0] if self.retries_due else math.inf), time.monotonic()
        retry = due - now <= pause
        if retry:
            # A retry this drain recorded starts when its backoff ends, not at a
            # poll up to a second later.
            pause = max(due - now, 0.0) + RETRY_SLACK
        if self.deadline is not None:
            pause = min(pause, max(self.deadline - time.monotonic(), 0.0))
        self.report.activity.wait()
        self._ticks()
        if waiter is None:
            time.sleep(pause)
        elif waiter.wait(pause):
            return WAIT_POLL_MIN  # an enqueue came first: the retry stays due
        if retry:
            now = time.monotonic()
            while self.retries_due and self.retries_due[0] <= now:
                heapq.heappop(self.retries_due)
            return WAIT_POLL_MIN
        return min(pause * 2, WAIT_POLL_MAX)

    def _claim(self, queue: QueueConfig) -> list[Message]:
        size = self.options.batch_size or queue.batch_size
        if self.options.max_messages is not None:
            done = self.report.succeeded + self.report.failed
            size = max(1, min(size, self.options.max_messages - done))
        tries = 0
        asked = 0.0
        if self.done and queue.rate_limit is not None:
            self._acknowledge_group(queue)  # a rate-limited claim takes tokens on its own
        # group_ack: the last batch's successes, deleted by the claim's own commit.
        grouped = [m.id for m in self.done]
        deleted = len(grouped)

        def claim(backend: Backend) -> list[Message]:
            nonlocal tries, asked, deleted
            tries += 1
            if tries > 1:
                # The first try's COMMIT may have happened with its reply lost: those
                # rows are ours but unknown. Between batches this drain holds nothing
                # else on the queue (but for the successes of the last, deleted first:
                # whether the first try did is unknown), so put back all it holds there.
                if grouped:
                    backend.ack_success_many(grouped, self.owner)
                backend.release_owner(queue.name, self.owner)
            asked = time.monotonic()  # heartbeat_at is set later than this
            if grouped and tries == 1:
                self.throttle.due_in = None
                deleted, batch = backend.claim_acking(queue.name, size, self.owner, grouped)
                return batch
            return self.throttle.claim(backend, queue, size, self.owner)

        batch = self._db(claim)
        if grouped:
            self._group_acknowledged(queue, grouped, deleted)
        self._lease_for = queue.stalled_after / 2
        self.stalled_after = queue.stalled_after
        self.lease_until = asked + self._lease_for
        self.beat_at = asked
        # A margin for the SIGKILL to land, and for two hosts' clocks to drift apart.
        self._hold_for = queue.stalled_after - min(queue.stalled_after / 4, 5.0)
        self.held = {m.id for m in batch}
        self.report.claimed += len(batch)
        if batch:
            log.debug("queue %s: claimed %d message(s)", queue.name, len(batch))
        return batch

    def _run_batch(self, queue: QueueConfig, batch: list[Message], runner: handlers.Runner) -> None:
        # At least once a second: the run log learns which message runs for long.
        tick_every = max(min(queue.stalled_after / 3, 1.0), 0.05)
        beat_every = queue.stalled_after / 3
        fenced = self.live == "session"
        if fenced:
            tick_every = min(tick_every, liveness.PROBE_EVERY)
        self._last_beat = time.monotonic()

        if queue.group_ack:
            # A success waits at most ack_delay for its group's DELETE, even while
            # the next handler runs for minutes: the runner's wait loop ticks that often.
            tick_every = min(tick_every, max(queue.ack_delay, 0.001))

        def tick() -> None:
            if self.done and time.monotonic() - self.done_since >= queue.ack_delay:
                self._acknowledge_group(queue)
            # A success sent while the next handler runs long: its result is read
            # (and logged) now, not when that handler ends.
            self.finish_in_flight(older_than=IN_FLIGHT_READ_AFTER)
            if time.monotonic() - self._last_beat >= beat_every:
                self._heartbeat()
            elif fenced and time.monotonic() - self.last_proof >= liveness.PROBE_EVERY:
                self._db(lambda b: b.probe())
            self._ticks()

        def admit(index: int) -> bool:
            if time.monotonic() >= self.lease_until:
                # Paused (SIGSTOP, a frozen VM) or the database away: renew before
                # starting anything, or learn that gc took it.
                self._heartbeat()
            elif fenced and time.monotonic() - self.last_proof >= liveness.PROBE_EVERY:
                self._db(lambda b: b.probe())
            # Nothing more starts once the fence fired: the batch ends at its next result.
            fenced_off = self.watchdog is not None and self.watchdog.fired
            return batch[index].id in self.held and not self._should_stop() and not fenced_off

        def not_after() -> float:
            # The worker may start a message sent ahead only before this: if this
            # drain freezes, what it sent must not run once gc may requeue it; nor,
            # with a session lock, once the fence would stop it.
            proof = self.last_proof + liveness.FENCE if fenced else math.inf
            return min(self.lease_until, proof, self.deadline or math.inf)

        jobs = [
            (m.payload or b"", handlers.MessageInfo(m.id, m.queue, m.error_count, m.created_at))
            for m in batch
        ]
        self.runlog.batch(batch)
        self.report.activity.run(batch[0].id)
        self.in_hand = True  # held until its results are recorded (session.py: _holding)
        carry = False
        results = runner.run_many(jobs, admit, queue.timeout or None, tick, tick_every, not_after)
        self.guard.arm(min(time.monotonic() + liveness.FENCE, self.beat_at + self._hold_for))
        if self.watchdog is not None:
            self.watchdog.arm()
        try:
            # closing: a handler still running when we leave early is killed
            # before its message is given back below.
            with closing(results):
                try:
                    self._record_results(queue, batch, results, tick)
                except DatabaseError as exc:
                    if isinstance(exc, SessionLost):
                        runner.kill()  # it may be running a message gc can take now
                    self._settle_after_failure(queue, batch, runner, results)
                    raise
            # group_ack: the successes left go with the next claim, one commit for
            # both (_claim), unless this drain stops here.
            carry = not self._should_stop()
        finally:
            if self.watchdog is not None:
                self.watchdog.disarm()
            self.guard.disarm()
            try:
                if self.done and not carry:
                    self._acknowledge_group(queue)
            finally:
                if self.held:
                    held = sorted(self.held)
                    returned = self._db(lambda b: b.release(held, self.owner))
                    self.report.returned += returned
                    log.info(
                        "queue %s: returned %d unstarted message(s) to ready", queue.name, returned
                    )
                    self.held = set()
        self.in_hand = False
        self.report.activity.run(None)

    def _heartbeat(self) -> None:
        self._last_beat = asked = time.monotonic()
        ids = sorted(self.held) + [m.id for m in self.done]
        if not ids:
            return
        try:
            refreshed = self._db(lambda b: b.heartbeat(ids, self.owner), patience=2.0)
            if refreshed < len(ids):
                still = set(self._db(lambda b: b.owned(ids, self.owner), patience=2.0))
                self.held &= still
                self._taken_while_stalled(self.beat_at)
            self.lease_until = asked + self._lease_for
            self.beat_at = asked
            # Every stalled_after/3 at most: a clock step is seen by the drains
            # that hold messages, whoever runs gc.
            clock.observe_quietly(self.backend)
        except SessionLost:
            raise
        except DatabaseError as exc:
            # The handler is still running; the acknowledgement will try again.
            self._say.warning("heartbeat failed: %s", exc)
