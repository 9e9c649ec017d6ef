"""Fleet slots: at most ``max_drains`` drains of a queue run its handler at once,
across every host.

A drain takes a fleet slot after its per-host slot (slots.py) and gives both
back together. A slot is one of ``max_drains`` locks per queue, held the way
the database lets a lock die with its holder:

- MariaDB/MySQL (one server) and PostgreSQL: a session lock (``GET_LOCK``, a
  session advisory lock) on the drain's connection, named from the backend's
  ``lock_scope``, the queue and the slot number (liveness.lock_name / lock_key).
  The scope is the table on PostgreSQL, whose advisory locks belong to one
  database; on MariaDB, whose lock names are server-wide, the database's name
  and the table, so two databases on one server never share a slot. A killed drain's
  session ends, and its slot is free at once. After a reconnect the drain takes
  its slot back; if another drain took it meanwhile, this one starts nothing more.
- Galera (locks are local to a node) and a PostgreSQL transaction pooler (a
  session lock does not stay with the drain): a row per slot in
  ``{table}_slots`` with its owner and a heartbeat the drain refreshes every
  ``stalled_after``/3; a slot whose heartbeat is older than ``stalled_after``
  is free, so a killed drain's slot frees within ``stalled_after``, as its
  messages do.
- SQLite (every drain of a file runs on its host): an flock on a file in
  ``<database file>.slots/<table>/``, beside the database rather than in the
  lock_dir, so drains with different lock_dirs share the cap. The kernel frees
  it when the drain dies.

Which kind a drain uses follows from its own liveness lock (drain/lease.py): a server
that gave it a session lock gives it session slots.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mq_cli.backends import dialects
from mq_cli.core.errors import MqError
from mq_cli.host import slots

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config, QueueConfig

log = logging.getLogger("mq")

#: tries to take a session slot back after a reconnect (the server may not have
#: seen the old session end yet), a growing pause between them
RETAKE_TRIES = 6


def slot_token(scope: str, queue: str, number: int) -> str:
    """What a session slot's lock name or key is derived from (``scope``: the
    backend's lock_scope)."""
    return f"fleet:{scope}:{queue}:{number}"


def slot_dir(config: Config) -> str:
    """SQLite: where the slots' lock files are (beside the database file)."""
    return os.path.join(os.path.abspath(config.database.path or "mq.db") + ".slots", config.table)


class Fleet:
    """The fleet slot one drain holds (at most one: a drain works one queue at a time)."""

    def __init__(
        self,
        config: Config,
        db: Callable[..., Any],
        owner: Callable[[], str],
        live: Callable[[], str | None],
    ):
        self.config = config
        self._db = db  # Drain._db: reconnects and retries
        self._owner = owner
        self._live = live
        self.kind: str | None = None  # "session", "row" or "file" while one is held
        self.queue: QueueConfig | None = None
        self.number = -1
        self._file: slots.Slot | None = None
        self._kept = 0.0
        #: the slot was taken from this drain (a reconnect came too late): start nothing more
        self.lost = False

    def take(self, queue: QueueConfig) -> bool:
        """A free fleet slot of ``queue`` (True; also when it has no max_drains), or False."""
        limit = queue.max_drains
        if limit is None:
            return True
        if dialects.get(self.config.database.kind).caps.file_locks:
            self._file = slots.acquire(slot_dir(self.config), queue.name, limit)
            got = self._file is not None
            self.kind, self.number = "file", self._file.number if self._file else -1
        else:
            kind = "session" if self._live() == "session" else "row"
            got = self._db(lambda b: self._take(b, queue, kind, limit))
        if not got:
            self.kind = None
            log.info("queue %s: all %d fleet slot(s) busy (max_drains)", queue.name, limit)
            return False
        self.queue, self._kept = queue, time.monotonic()
        log.debug("queue %s: fleet slot %d of %d (%s)", queue.name, self.number, limit, self.kind)
        return True

    def _take(self, backend: Backend, queue: QueueConfig, kind: str, limit: int) -> bool:
        scope, owner = backend.lock_scope, self._owner()
        for number in range(limit):
            if kind == "session":
                got = backend.live_lock_take(slot_token(scope, queue.name, number))
            else:
                got = backend.slot_row_take(queue.name, number, owner, queue.stalled_after)
            if got:
                self.kind, self.number = kind, number
                return True
        return False

    def keep(self) -> None:
        """Often (each tick of the drain): refresh a slot row's heartbeat when due."""
        queue = self.queue
        if self.kind != "row" or queue is None:
            return
        if time.monotonic() - self._kept < queue.stalled_after / 3:
            return
        self._kept = time.monotonic()
        owner = self._owner()
        try:
            kept = self._db(lambda b: b.slot_row_keep(queue.name, self.number, owner), patience=2.0)
        except MqError as exc:
            log.warning(
                "queue %s: could not refresh the fleet slot's heartbeat: %s", queue.name, exc
            )
            return
        if not kept:
            self._lose(queue)

    def retake(self, backend: Backend) -> None:
        """After a reconnect (a session slot died with the old session): take it back."""
        queue = self.queue
        if self.kind != "session" or queue is None:
            return
        token = slot_token(backend.lock_scope, queue.name, self.number)
        for attempt in range(RETAKE_TRIES):
            if backend.live_lock_take(token):
                return
            time.sleep(0.2 * (attempt + 1))
        self._lose(queue)

    def _lose(self, queue: QueueConfig) -> None:
        self.lost = True
        log.warning(
            "queue %s: another drain took this drain's fleet slot (max_drains) while it "
            "could not show itself alive; it starts nothing more", queue.name,
        )  # fmt: skip

    def release(self) -> None:
        queue, kind, number = self.queue, self.kind, self.number
        self.queue, self.kind = None, None
        if queue is None:
            return
        if self._file is not None:
            self._file.release()
            self._file = None
            return
        owner = self._owner()

        def give_back(backend: Backend) -> None:
            if kind == "session":
                backend.live_lock_release(slot_token(backend.lock_scope, queue.name, number))
            else:
                backend.slot_row_release(queue.name, number, owner)

        try:
            self._db(give_back, patience=0.0)
        except MqError as exc:  # a session slot died with its session; a row goes stale
            log.info("queue %s: fleet slot not given back (%s); it frees itself", queue.name, exc)


def in_use(backend: Backend, config: Config, queue: QueueConfig) -> int | None:
    """How many of ``queue``'s fleet slots are held now (a read: nothing is taken);
    None when it has no max_drains."""
    limit = queue.max_drains
    if limit is None:
        return None
    if backend.caps.file_locks:
        return sum(_file_held(os.path.join(slot_dir(config), f"{queue.name}.{n}.lock"))
                   for n in range(limit))  # fmt: skip
    held = 0
    if not getattr(getattr(backend, "server", None), "galera", False):
        held = sum(
            not backend.live_lock_free(slot_token(backend.lock_scope, queue.name, n))
            for n in range(limit)
        )
    if not backend.limits_missing():
        held += backend.slot_rows_in_use(queue.name, limit, queue.stalled_after)
    return min(held, limit)


def _file_held(path: str) -> bool:
    """Whether the pid a slot file names (slots.py writes it) is a live process."""
    try:
        with open(path, encoding="ascii") as handle:
            pid = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
