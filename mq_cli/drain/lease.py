"""The drain's liveness: the lock that shows it alive (liveness.py), the lease on
what it holds (renewed by each claim and heartbeat, before gc could take it), the
watchdog that fences a drain cut off from its lock, and the guard that ends a
handler its drain can no longer vouch for.

One part of the drain (loop.py composes them), over the session (session.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mq_cli.backends import liveness
from mq_cli.core.config import Config, QueueConfig
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import DatabaseError, SessionLost
from mq_cli.drain import watchdog
from mq_cli.drain.session import DrainSession, TakenForDead
from mq_cli.host import clock
from mq_cli.runners import guard
from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")


class Lease:
    """How long what the drain holds is safe from gc, and the proofs that keep it so.
    ``runner``: the handler runner working now, if any (the fence kills its handler)."""

    def __init__(
        self,
        config: Config,
        session: DrainSession,
        runner: Callable[[], Runner | None],
    ) -> None:
        self.config = config
        self.session = session
        self._runner = runner
        self.guard = guard.Guard()
        # Until when (time.monotonic) no gc can take what this drain holds:
        # half of stalled_after after the last claim or heartbeat that covered it.
        self.until = 0.0
        self._for = 0.0  # stalled_after / 2 of the queue being drained
        # The running handler's lease (guard.py) ends at the latest this long after
        # the claim or heartbeat that last covered it: before gc could take it.
        self._hold_for = 0.0
        # time.monotonic() when the claim or heartbeat that last covered the held
        # messages was sent, and the queue's stalled_after: gc may take them after that.
        self.beat_at = 0.0
        self.stalled_after = 0.0
        self.last_beat = 0.0  # time.monotonic() of the last heartbeat tried
        self._file_lock: liveness.FileLock | None = None

    def take_liveness(self) -> None:
        """Hold a lock named after this drain's owner token for as long as it runs, and
        mark the token so gc knows to look at it (liveness.py); start the watchdog."""
        session = self.session
        token = session.owner + liveness.LIVE_MARK
        if session.backend.caps.file_locks:
            try:
                self._file_lock = liveness.FileLock(self.config.lock_dir, token)
                session.owner, session.live = token, "file"
            except OSError as exc:
                log.info("no drain lock file (%s): heartbeats alone show this drain alive", exc)
        elif session.db(lambda b: b.live_lock_take(token)):
            session.owner, session.live = token, "session"
        fence = liveness.FENCE if session.live == "session" else None
        session.watchdog = watchdog.Watchdog(
            lambda: session.last_proof, self._fence, fence=fence, keep=self._keep
        )

    def _keep(self, now: float) -> None:
        # The watchdog's thread: the running handler may go on FENCE seconds past
        # this sign of life, and never past the time gc could take its message.
        self.guard.renew(min(now + liveness.FENCE, self.beat_at + self._hold_for))

    def _fence(self) -> None:
        # The watchdog's thread: only a signal to the handler, nothing else.
        runner = self._runner()
        if runner is not None:
            runner.kill()

    def claimed(self, queue: QueueConfig, asked: float) -> None:
        """A claim sent at ``asked`` covers what the drain holds now."""
        self._for = queue.stalled_after / 2
        self.stalled_after = queue.stalled_after
        self.until = asked + self._for
        self.beat_at = asked
        # A margin for the SIGKILL to land, and for two hosts' clocks to drift apart.
        self._hold_for = queue.stalled_after - min(queue.stalled_after / 4, 5.0)

    def arm(self) -> None:
        """A batch starts: the guard's first lease, and the watchdog on duty."""
        self.guard.arm(min(time.monotonic() + liveness.FENCE, self.beat_at + self._hold_for))
        if self.session.watchdog is not None:
            self.session.watchdog.arm()

    def disarm(self) -> None:
        if self.session.watchdog is not None:
            self.session.watchdog.disarm()
        self.guard.disarm()

    def close(self) -> None:
        if self.session.watchdog is not None:
            self.session.watchdog.close()
        self.guard.close()
        if self._file_lock is not None:
            self._file_lock.release()

    def heartbeat(self) -> None:
        session = self.session
        self.last_beat = asked = time.monotonic()
        ids = sorted(session.held) + [m.id for m in session.done]
        if not ids:
            return
        try:
            refreshed = session.db(lambda b: b.heartbeat(ids, session.owner), patience=2.0)
            if refreshed < len(ids):
                still = set(session.db(lambda b: b.owned(ids, session.owner), patience=2.0))
                session.held &= still
                self.taken_while_stalled(self.beat_at)
            self.until = asked + self._for
            self.beat_at = asked
            # Every stalled_after/3 at most: a clock step is seen by the drains
            # that hold messages, whoever runs gc.
            clock.observe_quietly(session.backend)
        except SessionLost:
            raise
        except DatabaseError as exc:
            # The handler is still running; the acknowledgement will try again.
            session.say.warning("heartbeat failed: %s", exc)

    def taken_while_stalled(self, since: float) -> None:
        """Found messages it held taken. A drain that heartbeats alone shows alive
        (Galera, a transaction pooler) and that was not itself stopped could not get
        its heartbeats written for stalled_after since ``since`` (a write stall, a
        cluster's view change): gc took it for dead, and what it ran may run again
        elsewhere. It stops and says so (exit 3), as a drain that lost its lock's
        session does. A drain that was stopped (SIGSTOP, a frozen VM) goes on: the
        guard ended what it ran, and nothing was wrong with the database."""
        session = self.session
        if session.live is not None or self.stalled_after <= 0:
            return
        gap = time.monotonic() - since
        if gap <= self.stalled_after:
            return
        if session.watchdog is not None and session.watchdog.stopped_since(since):
            return
        raise TakenForDead(
            f"gc took messages this drain held: its heartbeats could not be written for "
            f"{gap:.1f} s, longer than stalled_after ({format_duration(self.stalled_after)}) "
            "(a stalled database or cluster?); what it ran may run again elsewhere"
        )
