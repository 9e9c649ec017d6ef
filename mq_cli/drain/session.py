"""The drain's database session: reconnect after a lost connection, take the
drain's lock back, give up after a while, and say so once a second at most.

The bottom of the drain's classes (session.py <- acks.py <- loop.py): each
level owns the state it keeps, set up in its own ``__init__``.
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
from mq_cli.core.errors import ConnectionLost, DatabaseError, ReadOnly, SessionLost
from mq_cli.core.models import Message
from mq_cli.drain import fleet, watchdog
from mq_cli.drain.ratelog import Throttled
from mq_cli.drain.report import DrainOptions

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


def owner_token() -> str:
    """Who holds a claim: host, pid and a random part (pids are reused)."""
    import os
    import secrets
    import socket

    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


class DrainSession:
    """The connection and the proof that this drain is alive."""

    def __init__(self, config: Config, backend: Callable[[], Backend], options: DrainOptions):
        self.config = config
        self._open_backend = backend
        self.owner = owner_token()
        self.held: set[int] = set()  # claimed ids whose result is not recorded yet
        self.done: list[Message] = []  # succeeded, deletion deferred (group_ack)
        self._backend: Backend | None = None
        self._gave_up = False  # the database stayed away for a whole reconnect window
        self._read_only_since: float | None = None  # time.monotonic() of the first refusal
        self._say = Throttled(log)  # reconnect lines: at most one a second
        # Liveness (liveness.py): "file" (SQLite's flock), "session" (a server lock
        # that dies with the connection: fenced), or None (heartbeats alone).
        self.live: str | None = None
        self.last_proof = 0.0  # time.monotonic() when a statement last proved the session
        self.watchdog: watchdog.Watchdog | None = None
        self._take_back_due = False  # reconnected: the lock first, then anything else
        self.reconnects = 0  # new sessions this drain opened after losing one
        failover = bool(config.database.hosts)
        self.reconnect_for = RECONNECT_FAILOVER_FOR if failover else RECONNECT_FOR
        self.fleet = fleet.Fleet(config, self._db, lambda: self.owner, lambda: self.live)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self._open_backend()
        return self._backend

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
                taken = self._db(lambda b: b.live_lock_take(token))
            except DatabaseError:
                taken = False
            if not taken:  # heartbeats alone show it alive from now on
                token, self.live = token[: -len(liveness.LIVE_MARK)], None
            try:
                self.backend.live_lock_release(old)
            except DatabaseError:
                pass  # gone with the old session already
        self.owner = token
        log.info("going on as %s", token)

    def _session_lost_text(self, why: str) -> str:
        return (
            f"lost the database session that showed this drain alive ({why}): its running "
            "handler was stopped; its messages come back through `mq gc --stalled --requeue` "
            "(or a requeue_stalled drain) within seconds"
        )
