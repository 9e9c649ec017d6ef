"""The drain: claim ready messages, run the handler on each, acknowledge each result.

One drain process works one queue at a time under a per-host slot. It is
single-threaded: while a handler runs, the runner calls back (`tick`) so the
drain refreshes the heartbeat of every message it holds on its own connection.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import random
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from contextlib import closing
from types import FrameType
from typing import Any

from mq_cli.backends import liveness
from mq_cli.backends.base import Backend
from mq_cli.core import render
from mq_cli.core.config import Config, QueueConfig
from mq_cli.core.errors import (
    ConfigError,
    ConnectionLost,
    DatabaseError,
    MqError,
    ReadOnly,
    SessionLost,
)
from mq_cli.core.models import Message
from mq_cli.drain import clock, fleet, ratelimit, runlog, slots, wakeup, watchdog
from mq_cli.drain.ratelog import Throttled
from mq_cli.drain.recovery import requeue_stalled
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.runners import guard, handlers, make_runner

log = logging.getLogger("mq")

# How long a drain keeps trying to reach a database that dropped its
# connection before it gives up (exit 3) and leaves its messages to go stalled.
RECONNECT_FOR = 15.0
# ... and when the URL lists several hosts (a standby to fail over to): long
# enough for a failover manager to notice the primary's death and promote one.
RECONNECT_FAILOVER_FOR = 60.0
# ... and a database that turned read-only (a failover demoted it): a new primary
# answers a reconnect within seconds, or this is a standby and waiting is in vain.
READ_ONLY_FOR = 3.5
WAIT_POLL_MIN = 0.05
WAIT_POLL_MAX = 1.0  # the contract: --wait polls at least once a second
PAUSE_LOOK_EVERY = 2.0  # a running drain looks whether its queue was paused
REQUEUE_LOOK_EVERY = 0.5  # a waiting requeue_stalled drain looks for dead drains' messages
# A retry becomes ready at the database's `now` + its backoff, stored to the
# millisecond: a waiting drain looks that much after the moment it computed.
RETRY_SLACK = 0.005
ERROR_LOG_WIDTH = 1000
GUARD_FIRED = (
    "killed: the drain could not renew the handler's lease (the drain was stopped, frozen "
    "or starved), so the handler was ended before another drain could take the message"
)  # characters of a failure's last line in the drain's log


def owner_token() -> str:
    """Who holds a claim: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


class Drain:
    def __init__(self, config: Config, backend: Callable[[], Backend], options: DrainOptions):
        self.config = config
        self._open_backend = backend
        self.options = options
        self.owner = owner_token()
        self.report = DrainReport()
        self.signals = 0
        self.runner: handlers.Runner | None = None
        self.held: set[int] = set()  # claimed ids whose result is not recorded yet
        self.done: list[Message] = []  # succeeded, deletion deferred (group_ack)
        self.done_since = 0.0  # time.monotonic() when the oldest of them succeeded
        self._backend: Backend | None = None
        # Until when (time.monotonic) no gc can take what this drain holds:
        # half of stalled_after after the last claim or heartbeat that covered it.
        self.lease_until = 0.0
        self._lease_for = 0.0  # stalled_after / 2 of the queue being drained
        # The running handler's lease (guard.py) ends at the latest this long after
        # the claim or heartbeat that last covered it: before gc could take it.
        self.beat_at = 0.0  # time.monotonic() when that claim or heartbeat was sent
        self._hold_for = 0.0
        self.guard = guard.Guard()
        self._gave_up = False  # the database stayed away for a whole reconnect window
        self._read_only_since: float | None = None  # time.monotonic() of the first refusal
        self._say = Throttled(log)  # reconnect lines: at most one a second
        # Liveness (liveness.py): "file" (SQLite's flock), "session" (a server lock
        # that dies with the connection: fenced), or None (heartbeats alone).
        self.live: str | None = None
        self._file_lock: liveness.FileLock | None = None
        self.last_proof = 0.0  # time.monotonic() when a statement last proved the session
        self.watchdog: watchdog.Watchdog | None = None
        self._take_back_due = False  # reconnected: the lock first, then anything else
        self._suspects: dict[str, float] = {}  # owner -> since when its lock is free
        # A heap of when (time.monotonic) the retries this drain recorded become ready.
        self.retries_due: list[float] = []
        self.runlog = runlog.RunLog(config, lambda: self.backend, lambda: self.owner, self.report)
        failover = bool(config.database.hosts)
        self.reconnect_for = RECONNECT_FAILOVER_FOR if failover else RECONNECT_FOR
        self.fleet = fleet.Fleet(config, self._db, lambda: self.owner, lambda: self.live)
        self.throttle = ratelimit.Throttle()

    # -- setup --------------------------------------------------------------

    def plan(self) -> list[tuple[QueueConfig, str]]:
        """Each queue to drain with its handler, every handler checked before anything is claimed."""
        names = self.options.queues or list(self.config.queues)
        if not names:
            raise ConfigError(
                "no queue to drain: give -q QUEUE, or configure queues (see config.example.yaml)"
            )
        plan = []
        for name in names:
            queue = self.config.queue(name)
            path = self.options.handler or queue.handler
            try:
                if not path:
                    where = self.config.source or "no config file"
                    raise ConfigError(
                        f"queue {name!r} has no handler ({where}): set queues.{name}.handler "
                        "in the config or pass --handler"
                    )
                handlers.resolve(path)
            except ConfigError as exc:  # seen in `mq status`, not only in one host's mail
                from mq_cli.drain import startfail

                startfail.record(self.config, self._open_backend, name, str(exc))
                raise
            plan.append((queue, str(path)))
        return plan

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self._open_backend()
        return self._backend

    # -- the run ------------------------------------------------------------

    def run(self) -> DrainReport:
        plan = self.plan()
        started = time.monotonic()
        self.runlog.queues = [queue.name for queue, _ in plan]
        self.deadline = started + self.options.max_seconds if self.options.max_seconds else None
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            slots.ensure_lock_dir(self.config.lock_dir)
            paused, stuck = self._db(lambda b: b.drain_notes())
            if stuck.keys() & set(self.runlog.queues):  # these can start again: no note
                startfail_clear(self._db, stuck.keys() & set(self.runlog.queues))
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
                slot = slots.acquire(self.config.lock_dir, queue.name, concurrency)
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
        return self.report

    def _take_liveness(self) -> None:
        """Hold a lock named after this drain's owner token for as long as it runs, and
        mark the token so gc knows to look at it (liveness.py); start the watchdog."""
        token = self.owner + liveness.LIVE_MARK
        if self.backend.kind == "sqlite":
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
        if not self.report.claimed or "gc --stalled" in text or "\n" in text:
            return exc  # nothing held, said already, or two lines already
        return type(exc)(
            f"{text}\nany message this drain held stays processing and shows as stalled "
            "after stalled_after; `mq gc --stalled --requeue` recovers them"
        )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            log.warning(
                "got %s: finishing the running handler, returning the rest",
                signal.Signals(signum).name,
            )
            if self.runner is not None:
                self.runner.stop()
        elif self.runner is not None:
            log.warning("got a second signal: stopping the running handler now")
            self.runner.kill()

    def _should_stop(self) -> bool:
        if self.signals or self.fleet.lost:
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return True
        limit = self.options.max_messages
        return limit is not None and self.report.succeeded + self.report.failed >= limit

    def _drain_queue(self, queue: QueueConfig, path: str) -> None:
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
                batch = self._claim(queue)
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
                except SessionLost as exc:
                    if not self._go_on_after(exc):
                        raise
        finally:
            self.runner = None
            runner.close()
            if waiter is not None:
                waiter.close()

    def _ticks(self) -> None:
        """Often, whatever the drain does: the run log's and the fleet slot's upkeep."""
        self.runlog.tick()
        self.fleet.keep()

    def _waiter(self, queue: QueueConfig) -> wakeup.Waiter | None:
        try:
            return wakeup.Waiter(self.config.lock_dir, queue.name, self.backend)
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
                queue.name, changed, _seconds(queue.stalled_after),
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

        def claim(backend: Backend) -> list[Message]:
            nonlocal tries, asked
            tries += 1
            if tries > 1:
                # The first try's COMMIT may have happened with its reply lost: those
                # rows are ours but unknown. Between batches this drain holds nothing
                # else on the queue, so put back all it holds there.
                backend.release_owner(queue.name, self.owner)
            asked = time.monotonic()  # heartbeat_at is set later than this
            return self.throttle.claim(backend, queue, size, self.owner)

        batch = self._db(claim)
        self._lease_for = queue.stalled_after / 2
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
            return batch[index].id in self.held and not self._should_stop()

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
        finally:
            if self.watchdog is not None:
                self.watchdog.disarm()
            self.guard.disarm()
            if self.done:
                self._acknowledge_group(queue)
            if self.held:
                held = sorted(self.held)
                returned = self._db(lambda b: b.release(held, self.owner))
                self.report.returned += returned
                log.info(
                    "queue %s: returned %d unstarted message(s) to ready", queue.name, returned
                )
                self.held = set()

    def _settle_after_failure(
        self,
        queue: QueueConfig,
        batch: list[Message],
        runner: handlers.Runner,
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
                    self.held.discard(batch[index].id)
        except Exception as exc:  # noqa: BLE001 - the database error is what is reported
            log.debug("while stopping after a database error: %s", exc)
            self.held.clear()  # unknown: return nothing that might have started
        if ran:
            log.warning(
                "queue %s: %d message(s) ran but their results could not be recorded; they "
                "stay processing until `mq gc --stalled --requeue` (or requeue_stalled) "
                "takes them back, and will run again",
                queue.name, ran,
            )  # fmt: skip

    def _record_results(
        self, queue: QueueConfig, batch: list[Message], results: Any, tick: Callable[[], None]
    ) -> None:
        """Acknowledge each outcome as the runner yields it."""
        for index, outcome in results:
            message = batch[index]
            if self.watchdog is not None and self.watchdog.fired:
                raise SessionLost(self._session_lost_text("no proof of it"))
            self.runlog.outcome(message, outcome)
            if not outcome.started:
                if message.id not in self.held:
                    # Lost while this drain was paused (SIGSTOP, a frozen VM, a cut
                    # link) past stalled_after: gc or another drain has it now.
                    log.warning(
                        "queue %s: message %d is no longer held by this drain (paused "
                        "past stalled_after?); skipped", queue.name, message.id,
                    )  # fmt: skip
                continue
            self.held.discard(message.id)
            if outcome.started and not outcome.ok and self.guard.fired():
                outcome = handlers.Outcome(ok=False, error=GUARD_FIRED)
            if self.signals > 1 and not outcome.ok:
                outcome = handlers.Outcome(ok=False, error="interrupted: the drain was stopped")
            if outcome.ok and self._deferrable(queue, message):
                self.report.succeeded += 1
                if not self.done:
                    self.done_since = time.monotonic()
                self.done.append(message)
            else:
                self._acknowledge(queue, message, outcome)
            if self.options.progress is not None:
                self.options.progress(self.report)
            tick()

    @staticmethod
    def _deferrable(queue: QueueConfig, message: Message) -> bool:
        # A tombstone (unique_retention) needs its own UPDATE; everything else can
        # wait for the batch's one DELETE.
        return queue.group_ack and not (queue.unique_retention > 0 and message.unique_key)

    def _acknowledge_group(self, queue: QueueConfig) -> None:
        """One DELETE for the successes so far: at the batch's end, or once the oldest has
        waited ack_delay. A crash before it re-runs them (at most a batch, at most
        ack_delay old but for the DELETE's own time)."""
        ids = [m.id for m in self.done]
        deleted = self._db(lambda b: b.ack_success_many(ids, self.owner))
        self.done = []
        log.info("queue %s: %d message(s) done (one acknowledgement)", queue.name, deleted)
        if deleted < len(ids):
            self.report.lost += len(ids) - deleted
            log.warning(
                "queue %s: %d succeeded message(s) were no longer held by this drain "
                "(requeued by an operator or gc?)",
                queue.name, len(ids) - deleted,
            )  # fmt: skip

    def _acknowledge(self, queue: QueueConfig, message: Message, outcome: handlers.Outcome) -> None:
        if outcome.ok:
            self.report.succeeded += 1
            ours = self._ack(
                lambda b: b.ack_success(message, self.owner, queue.unique_retention),
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
                lambda b: b.ack_failure(message, self.owner, error, retry_in, final),
                lambda after: (
                    after is not None
                    and after.owner is None
                    and after.error_count == message.error_count + 1
                ),
                message,
            )
            if ours:
                if not final and self.options.wait:
                    heapq.heappush(self.retries_due, time.monotonic() + retry_in)
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
                        "queue %s: message %d failed (attempt %d of %d, retry in %s): %s",
                        queue.name, message.id, attempts, queue.max_errors,
                        _seconds(retry_in), first_line,
                    )  # fmt: skip
        if not ours:
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
    ) -> bool:
        """Run an acknowledgement; True when it took effect.

        If the connection dropped, the first try may have committed with its
        reply lost, and the retry then matches nothing: ``landed`` tells from
        the row as it is now whether that first try did the job.
        """
        tries = 0

        def attempt(backend: Backend) -> bool:
            nonlocal tries
            tries += 1
            return change(backend)

        if self._db(attempt):
            return True
        if tries > 1:
            return landed(self._db(lambda b: b.get_message(message.id)))
        return False

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

    # -- database trouble -----------------------------------------------------

    def _db(self, operation: Callable[[Backend], Any], patience: float | None = None) -> Any:
        """Run ``operation``; after a lost connection, reconnect and retry for a while.

        Every operation is guarded by the owner token, so running one twice
        (the first attempt may have committed before the connection dropped)
        never changes another drain's claim.
        """
        if patience is None:
            patience = self.reconnect_for
        if self._gave_up:
            patience = 0.0  # already waited once: the cleanup on the way out tries only once
        lost_at = time.monotonic()
        give_up = lost_at + patience
        pause = 0.2
        tries = 0
        while True:
            sent = time.monotonic()
            try:
                if self._take_back_due:
                    self._take_back()
                    self._take_back_due = False
                    sent = time.monotonic()
                result = operation(self.backend)
                self.last_proof = max(self.last_proof, sent)
                self._read_only_since = None
                return result
            except ConnectionLost as exc:
                if isinstance(exc, ReadOnly):
                    # The server answered on the session that holds this drain's lock
                    # (a read-only one still grants it): proof the session lives. Then
                    # a role change: reconnect (a new primary?) for READ_ONLY_FOR from
                    # the first refusal, across operations.
                    self.last_proof = max(self.last_proof, sent)
                    since = self._read_only_since = self._read_only_since or time.monotonic()
                    give_up = min(give_up, since + READ_ONLY_FOR)
                if time.monotonic() >= give_up:
                    self._gave_up = True
                    raise DatabaseError(
                        f"{exc}\nheld message(s) stay processing and show as stalled after "
                        "stalled_after; `mq gc --stalled --requeue` recovers them"
                    ) from exc
                tries += 1
                # Once per outage on stderr (and at most once a second); each further
                # try at -v (a failover may take a minute).
                if tries == 1:
                    self._say.warning("%s; reconnecting (try 1)", exc)
                else:
                    log.info("%s; reconnecting (try %d)", exc, tries)
                since = time.monotonic() - lost_at
                if self.live == "session" and (self.held or self.done) and since < liveness.FENCE:
                    # Its lock is free until it reconnects: gc takes a drain whose
                    # lock stays free for liveness.SUSPECT as dead. Try often.
                    time.sleep(random.uniform(0.05, 0.15))
                else:
                    time.sleep(pause + random.uniform(0, pause))
                    # A new primary may answer any moment: look at least twice a second.
                    pause = min(pause * 2, 0.5 if isinstance(exc, ReadOnly) else 2.0)
                try:
                    self.backend.reconnect()
                except DatabaseError as again:
                    if tries == 1:
                        self._say.warning("reconnect failed: %s", again)
                    else:
                        log.info("reconnect failed: %s", again)
                    continue
                self._take_back_due = self.live == "session"

    def _take_back(self) -> None:
        """After a reconnect: take this drain's lock again on the new session, then
        check with an owner-guarded heartbeat that nothing it held was taken while
        the lock was free. Raises SessionLost if either fails."""
        backend = self.backend
        for attempt in range(6):
            # The server may not have seen the old session go yet (it holds the lock).
            if backend.live_lock_take(self.owner):
                break
            time.sleep(0.2 * (attempt + 1))
        else:
            raise SessionLost(self._session_lost_text("could not take its lock back"))
        self.fleet.retake(backend)
        ids = sorted(self.held) + [m.id for m in self.done]
        if ids and backend.heartbeat(ids, self.owner) < len(ids):
            raise SessionLost(self._session_lost_text("gc took messages it held"))
        log.info("took the drain's lock back on a new session")

    def _go_on_after(self, exc: SessionLost) -> bool:
        """Whether to go on after the session was lost: yes where the URL lists several
        hosts (a failover). The running handler was stopped, what did not start was
        given back, and what ran stays processing for gc, as in a drain that exits;
        every acknowledgement is owner-guarded, so nothing of another drain is touched."""
        if not self.config.database.hosts or self._gave_up:
            return False
        log.warning("%s; going on with new claims (several hosts: a failover?)", exc)
        if self.watchdog is not None:
            self.watchdog.fired = False
        return True

    def _session_lost_text(self, why: str) -> str:
        return (
            f"lost the database session that showed this drain alive ({why}): its running "
            "handler was stopped; its messages come back through `mq gc --stalled --requeue` "
            "(or a requeue_stalled drain) within seconds"
        )


def startfail_clear(db: Callable[..., Any], queues: set[str]) -> None:
    from mq_cli.drain.startfail import clear

    clear(db, queues)


def _seconds(value: float) -> str:
    from mq_cli.core.durations import format_duration

    return format_duration(value)
