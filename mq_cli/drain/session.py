"""The drain's database session: reconnect after a lost connection, take the
drain's lock back, give up after a while (holding messages) or wait for the
database up to the drain's end (holding none: outage.py), and say so once a
second at most.

One part of the drain (loop.py composes them): it owns the connection, the
owner token and the liveness it proves, and what the drain holds (claimed,
in hand, succeeded and not yet deleted), which the other parts read and change
through it. It also says what becomes of those when the database fails.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from mq_cli.backends import liveness
from mq_cli.backends.base import Backend
from mq_cli.core.config import Config
from mq_cli.core.errors import (
    ClaimUnknown,
    ConnectionLost,
    DatabaseError,
    ReadOnly,
    SessionLost,
    Unreachable,
)
from mq_cli.core.models import Message
from mq_cli.drain import outage, watchdog
from mq_cli.drain.ratelog import Throttled
from mq_cli.drain.report import DrainOptions
from mq_cli.host import fleet

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
# Past its --max-seconds (or past a loss that came after it), a drain tries to record
# what it holds for this long at most, not the whole reconnect window: the next cron
# run of its line waits for its slot meanwhile (slots.py: take_over).
RECORD_AFTER_END = 5.0
LEFT_SHOWN = 20  # ids of messages left for gc named on stderr (--json has them all)
# While it reconnects, a drain looks this often whether a second signal came.
SIGNAL_LOOK_EVERY = 0.05


class DatabaseAway(DatabaseError):
    """The database stayed away: for the reconnect window while the drain held
    messages (which stay processing for gc), or until its end while it held none."""


class StoppedWhileAway(DatabaseAway):
    """A second SIGTERM or SIGINT while the drain held messages and reconnected: it
    stops at once (exit 3); what it held stays processing for gc."""

    ended = "signal"  # the report's: what ended the run (loop.py)


class TakenForDead(SessionLost):
    """A drain that heartbeats alone found what it held taken by gc while its writes
    stalled: it stops and says so (exit 3), unless the URL lists several hosts."""


class WaitInterrupted(DatabaseError):
    """SIGTERM or SIGINT while the drain waited for its database, holding nothing:
    it ends as after any signal (exit 0)."""

    exit_code = 0


def owner_token() -> str:
    """Who holds a claim: host, pid and a random part (pids are reused)."""
    import os
    import socket

    # os.urandom: what secrets.token_hex reads (fence.py says why not secrets)
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{os.urandom(4).hex()}"


class DrainSession:
    """The connection and the proof that this drain is alive."""

    def __init__(self, config: Config, backend: Callable[[], Backend], options: DrainOptions):
        self.config = config
        self.open_backend = backend
        self.owner = owner_token()
        self.held: set[int] = set()  # claimed ids whose result is not recorded yet
        self.done: list[Message] = []  # succeeded, deletion deferred (group_ack)
        self._backend: Backend | None = None
        self._gave_up = False  # the database stayed away for a whole reconnect window
        self._stopped = False  # a second signal while away: no statement is tried again
        #: the error that gave up what it held: a cleanup that fails after it raises it
        #: again, so that the drain's last word says why and what becomes of them
        self._away: DatabaseError | None = None
        #: ids this drain stopped holding unrecorded (report.py: for_gc)
        self.left: set[int] = set()
        self._read_only_since: float | None = None  # time.monotonic() of the first refusal
        self.say = Throttled(log)  # reconnect lines: at most one a second
        # Liveness (liveness.py): "file" (SQLite's flock), "session" (a server lock
        # that dies with the connection: fenced), or None (heartbeats alone).
        self.live: str | None = None
        self.last_proof = 0.0  # time.monotonic() when a statement last proved the session
        self.watchdog: watchdog.Watchdog | None = None
        self._take_back_due = False  # reconnected: the lock first, then anything else
        self.reconnects = 0  # new sessions this drain opened after losing one
        failover = bool(config.database.hosts)
        self.reconnect_for = RECONNECT_FAILOVER_FOR if failover else RECONNECT_FOR
        self.fleet = fleet.Fleet(config, self.db, lambda: self.owner, lambda: self.live)
        # Set by the loop (loop.py): the run's end (time.monotonic(), --max-seconds),
        # the signals it got, whether a batch is being worked (its messages, the one
        # being acknowledged included, count as held) and the queue, for log lines.
        self.deadline: float | None = None
        self.signals = 0
        self.in_hand = False
        #: a claim was lost where it may have taken messages (ClaimUnknown), and no
        #: claim has come back since (a retried claim first gives back all it holds)
        self.claim_unknown = False
        self.where = ""
        patience = max(outage.PATIENCE, self.reconnect_for)
        self.outage = outage.Outage(lambda: self.deadline, options.wait, patience)
        #: what other parts forget when the drain lets go of what it held
        self.on_let_go: list[Callable[[], None]] = []

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.open_backend()
        return self._backend

    def holding(self) -> bool:
        """Whether the drain holds messages: claimed, running, or acknowledged unseen."""
        return self.in_hand or bool(self.held or self.done)

    def let_go(self) -> None:
        """Forget what it held: those messages stay processing for gc (see go_on_after)."""
        self.left |= self.held | {m.id for m in self.done}
        self.held = set()
        self.done = []
        self.in_hand = False
        for forget in self.on_let_go:
            forget()

    def leave_for_gc(self, error: Exception | None = None) -> list[int]:
        """At the drain's end: what it leaves processing for gc, by id (--json's
        for_gc), named on stderr: at the end of the ``error`` that ends it, whose
        last line says what becomes of them (cron mails the same lines, no more),
        else on a line of its own."""
        self.let_go()  # what it still holds now stays so
        left = sorted(self.left)
        if left:
            more = len(left) - LEFT_SHOWN
            ids = ", ".join(map(str, left[:LEFT_SHOWN]))
            ids += f" and {more} more (--json lists all)" if more > 0 else ""
            line = f"left processing until `mq gc --stalled --requeue` takes them back: message(s) {ids}"
            if error is None:
                log.warning("%s", line)
            elif "gc --stalled" in str(error):  # its hint says so: the ids end it
                error.args = (f"{error}: message(s) {ids}",)
            else:
                error.args = (f"{error}\n{line}",)
        return left

    def db(self, operation: Callable[[Backend], Any], patience: float | None = None) -> Any:
        """Run ``operation``; after a lost connection, reconnect and retry for a while:
        ``patience`` seconds (default RECONNECT_FOR) while the drain holds messages,
        else, by default, until its end (outage.py).

        Every operation is guarded by the owner token, so running one twice
        (the first attempt may have committed before the connection dropped)
        never changes another drain's claim.
        """
        rides = patience is None and not self._gave_up  # may wait out an outage
        if patience is None:
            patience = self.reconnect_for
        if self._gave_up:
            patience = 0.0  # already waited once: the cleanup on the way out tries only once
        lost_at = time.monotonic()
        give_up = lost_at + patience
        # Past its end, what it holds is given up RECORD_AFTER_END after the later of its
        # end and this loss (at most: the reconnect window may end first).
        ends = None if self.deadline is None else max(self.deadline, lost_at) + RECORD_AFTER_END
        if self._stopped and self._away is not None:
            raise self._away
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
                if self.outage.since is not None:
                    self.outage.over(self.where)
                return result
            except (ConnectionLost, Unreachable) as exc:
                self.outage.begin()
                self.claim_unknown = self.claim_unknown or isinstance(exc, ClaimUnknown)
                read_only = isinstance(exc, ReadOnly)
                if read_only:
                    # The server answered on the session that holds this drain's lock
                    # (a read-only one still grants it): proof the session lives. Then
                    # a role change: reconnect (a new primary?) for READ_ONLY_FOR from
                    # the first refusal, across operations.
                    self.last_proof = max(self.last_proof, sent)
                    since = self._read_only_since = self._read_only_since or time.monotonic()
                    give_up = min(give_up, since + READ_ONLY_FOR)
                if rides and not read_only and not self.holding():
                    self._wait_for_database(exc)
                elif self._away is not None and patience == 0.0:
                    raise self._away from exc  # the cleanup's one try, after giving up
                else:
                    if self.signals > 1 and self.holding():
                        # Asked twice to stop: what it holds is left for gc now.
                        self._stopped = self._gave_up = True
                        self._away = self._given_up(exc, "stopped at once by a second signal")
                        raise self._away from exc
                    limit, why = give_up, ""
                    if ends is not None and ends < give_up and self.holding():
                        after = "its --max-seconds ended"
                        if self.deadline is not None and lost_at > self.deadline:
                            after = "the loss (its --max-seconds had ended)"
                        limit = ends
                        why = f"gave up recording what it held {RECORD_AFTER_END:g} s after {after}"
                    if time.monotonic() >= limit:
                        # What it holds is given up; the cleanup on the way out tries once.
                        self._gave_up = self._gave_up or self.holding() or read_only
                        away = self._given_up(exc, why)
                        if self.holding():
                            self._away = self._away or away
                        raise away from exc
                    tries += 1
                    # Once per outage on stderr (and at most once a second); each further
                    # try at -v (a failover may take a minute).
                    if tries == 1:
                        self.say.warning("%s; reconnecting (try 1)", exc)
                    else:
                        log.info("%s; reconnecting (try %d)", exc, tries)
                    since = time.monotonic() - lost_at
                    if self.live == "session" and self.holding() and since < liveness.FENCE:
                        # Its lock is free until it reconnects: gc takes a drain whose
                        # lock stays free for liveness.SUSPECT as dead. Try often.
                        self._nap(random.uniform(0.05, 0.15), limit)
                    else:
                        self._nap(pause + random.uniform(0, pause), limit)
                        # A new primary may answer any moment: look at least twice a second.
                        pause = min(pause * 2, 0.5 if read_only else 2.0)
                try:
                    self._reconnect()
                except DatabaseError as again:
                    if tries == 1:
                        self.say.warning("reconnect failed: %s", again)
                    else:
                        log.info("reconnect failed: %s", again)
                    continue

    def _nap(self, seconds: float, limit: float) -> None:
        """Sleep between reconnects, up to ``limit`` (when it gives up) at most; cut
        short by a second signal (a handler that returns lets time.sleep go on: PEP 475)."""
        end = min(time.monotonic() + seconds, limit)
        while self.signals < 2 and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, SIGNAL_LOOK_EVERY))

    def _wait_for_database(self, exc: DatabaseError) -> None:
        """Holding nothing, wait for the database up to the drain's end (outage.py):
        sleep before the next try, or stop waiting (its end, or a signal)."""
        if self.signals:
            raise WaitInterrupted(f"{self.where}stopped while waiting for the database ({exc})")
        if time.monotonic() >= self.outage.until():
            self._gave_up = True
            raise DatabaseAway(
                f"{exc}\n{self.outage.ended_text(self.where, self.claim_unknown)}"
            ) from exc
        self.outage.announce(self.where, exc)
        time.sleep(self.outage.pause())

    def _given_up(self, exc: ConnectionLost | Unreachable, why: str = "") -> DatabaseError:
        """The error that ends the reconnect window (``why`` it ended early, if it did):
        saying what becomes of what it held."""
        text = str(exc)
        if why:
            text = f"{self.where}{why}: the database is away ({text})"
        if self.holding():
            text += (
                "\nheld message(s) stay processing and show as stalled after stalled_after; "
                "`mq gc --stalled --requeue` recovers them"
            )
        if why.startswith("stopped"):
            return StoppedWhileAway(text)
        if isinstance(exc, ReadOnly):
            return DatabaseError(text)  # a standby does not become a primary by waiting
        return DatabaseAway(text)

    def _reconnect(self) -> None:
        if self._backend is None:  # the first connection, which failed (at start-up)
            self._backend = self.open_backend()
            return
        self._backend.reconnect()
        self.reconnects += 1
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
            raise SessionLost(self.session_lost_text("could not take its lock back"))
        self.fleet.retake(backend)
        ids = sorted(self.held) + [m.id for m in self.done]
        if ids and backend.heartbeat(ids, self.owner) < len(ids):
            raise SessionLost(self.session_lost_text("gc took messages it held"))
        log.info("took the drain's lock back on a new session")

    def go_on_after(self, exc: DatabaseError) -> bool:
        """Whether to go on after the session was lost (SessionLost) or the database
        stayed away while the drain held messages (DatabaseAway): yes until the drain's
        end (outage.py), unless gc took it for dead (TakenForDead: exit 3, except where
        the URL lists several hosts, a failover). The running handler was stopped, what
        did not start was given back where it could be, and what ran or could not be
        given back stays processing for gc, as in a drain that exits; it goes on under
        a new owner token, so nothing of that is touched again."""
        if isinstance(exc, TakenForDead) and not self.config.database.hosts:
            return False
        if self.signals or time.monotonic() >= self.outage.until():
            return False
        log.warning("%s%s; going on with new claims", self.where, "; ".join(str(exc).splitlines()))
        self.let_go()
        self._gave_up, self._away = False, None
        self._rename()
        if self.watchdog is not None:
            self.watchdog.fired = False
        return True

    def _rename(self) -> None:
        """Go on under a new owner token. What ran under the old one and could not be
        recorded stays processing for gc (its lock given up: dead at once); a claim
        retried after a lost reply, which gives back all its owner holds, must not
        give those back to run them here again."""
        old, token = self.owner, owner_token()
        if self.live == "session":
            token += liveness.LIVE_MARK
            try:
                self.backend.live_lock_release(old)
                taken = self.backend.live_lock_take(token)
            except (ConnectionLost, Unreachable):
                # No session now: the lock is taken after the reconnect (_take_back),
                # before anything else, under the new token.
                taken = True
            except DatabaseError:
                taken = False
            if not taken:  # heartbeats alone show it alive from now on
                token, self.live = token[: -len(liveness.LIVE_MARK)], None
        self.owner = token
        log.info("going on as %s", token)

    def session_lost_text(self, why: str) -> str:
        return (
            f"lost the database session that showed this drain alive ({why}): its running "
            "handler was stopped; its messages come back through `mq gc --stalled --requeue` "
            "(or a requeue_stalled drain) within seconds"
        )

    def with_recovery_hint(self, exc: DatabaseError) -> DatabaseError:
        """The error, saying what becomes of what this drain held (a full disk, a
        refused write: its messages could not be recorded or given back)."""
        text = str(exc)
        if not self.holding() or "gc --stalled" in text or "\n" in text:
            return exc  # nothing held, said already, or two lines already
        return type(exc)(
            f"{text}\nany message this drain held stays processing and shows as stalled "
            "after stalled_after; `mq gc --stalled --requeue` recovers them"
        )
