"""What every SQL backend does the same way, over one narrow executor.

A dialect (sqlite/, mysql/, postgres/) brings the connection, its errors as mq's
(:meth:`SqlBackend._wrap`), begin/commit/rollback, how times and durations travel
as parameters, and how messages are inserted. On those, :class:`SqlBackend` is the
executor (plumbing.py: reads, changes, transactions with deadlock retries) and does
for every dialect what the drain does: enqueue, claim (claims.py), owner-guarded
acknowledgements. Its parts build on that executor: the schema and `mq init`
(sqlschema.py), meta.py, the operators' statements (sqlops.py), the fleet limits
(sqllimits.py), the run log (sqlrunlog.py). The statements are the named blocks
of <dialect>/<dialect>.sql, the same names in each.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from operator import itemgetter
from typing import Any, TypeVar

from mq_cli.backends import claims, commits, sqllimits, sqlrunlog
from mq_cli.backends.base import Backend
from mq_cli.backends.claims import claim_in, claimed, select_and_mark, unknown_if_lost
from mq_cli.backends.inserts import initial_status
from mq_cli.backends.meta import SqlMeta
from mq_cli.backends.plumbing import Tx
from mq_cli.backends.schema import migrate
from mq_cli.backends.sqlfiles import placeholders
from mq_cli.backends.sqllimits import SqlLimits
from mq_cli.backends.sqlops import SqlOperate
from mq_cli.backends.sqlrunlog import SqlRunLog
from mq_cli.backends.sqlschema import SqlSchema
from mq_cli.core.errors import Deadlock, MqError, SchemaMissing
from mq_cli.core.models import Message
from mq_cli.core.states import Stored

T = TypeVar("T")

log = logging.getLogger("mq")

#: tries of a statement that deadlocked (a dialect may raise it: Galera)
RETRIES = 8
#: seconds between two promotions of a queue's due delayed messages by one
#: drain while its claims come back full (a short claim promotes at once)
PROMOTE_EVERY = 0.5


def backoff(attempt: int) -> None:
    # Jitter: two drains that collided do not collide again; at most 0.5 s between
    # tries (Galera's 40 span ~15 s). Imported here: every `mq enqueue` would load it.
    import random

    time.sleep(min(random.uniform(0.005, 0.05) * (attempt + 1), 0.5))


class SqlBackend(Backend):
    """The shared body of every SQL backend; a dialect subclasses it."""

    #: the dialect's name: its <dialect>/<dialect>.sql and its ``kind``
    dialect: str
    #: the placeholder of a bound value
    mark = "%s"
    #: the driver's exceptions that _wrap maps into mq's errors
    driver_errors: tuple[type[BaseException], ...] = ()
    retries = RETRIES
    conn: Any
    _sql: dict[str, str]
    #: queue -> time.monotonic() of this connection's last promotion of it
    _promoted: dict[str, float]
    #: the statements `mq init` runs on a fresh database, by name
    ddl_names: tuple[str, ...] = ("create_table", "create_meta")
    runlog_ddl: tuple[str, ...] = sqlrunlog.DDL
    limits_ddl: tuple[str, ...] = sqllimits.DDL

    # -- the parts on this executor, made at first use (a dialect's __init__ calls none)

    @cached_property
    def schema(self) -> SqlSchema:
        return SqlSchema(self)

    @cached_property
    def meta(self) -> SqlMeta:
        return SqlMeta(self, self.now)

    @cached_property
    def operate(self) -> SqlOperate:
        return SqlOperate(self, self.dead_owners)

    @cached_property
    def limits(self) -> SqlLimits:
        return SqlLimits(self)

    @cached_property
    def runlog(self) -> SqlRunLog:
        return SqlRunLog(self)

    def ddl(self) -> list[str]:
        return [self._sql[name] for name in self.ddl_names]

    def _migrate(self) -> list[str]:
        """What `mq init` does under its lock (a dialect may add to it)."""
        return migrate(self)

    def _schema_race(self, exc: BaseException) -> bool:
        """Whether a driver error says another process made what init was making
        (a table, a column, an index that exists, one to drop that does not)."""
        return False

    # -- what a dialect provides ------------------------------------------------

    @abstractmethod
    def _wrap(self, exc: BaseException) -> MqError:
        """The mq error for a driver error."""

    @abstractmethod
    def _begin(self) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None:
        """Roll back, quietly (the connection may be gone already)."""

    @abstractmethod
    def _insert(
        self,
        tx: Tx,
        queue: str,
        payloads: Sequence[bytes],
        when: object,
        priority: int,
        unique_key: str | None,
        status: Stored,
    ) -> list[int | None]:
        """Insert the messages inside ``tx``; ids in order, None where skipped.
        ``status``: 'ready', or 'delayed' for messages not due yet (see :func:`initial_status`)."""

    @abstractmethod
    def _time(self, value: Any) -> datetime | None:
        """A time as the driver returns it, as an aware UTC datetime."""

    @abstractmethod
    def _shift(self, seconds: float) -> object:
        """The parameter for "the server's now plus ``seconds``" in this dialect's SQL."""

    def _cursor(self) -> Any:
        return self.conn.cursor()

    # -- plumbing ---------------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self.driver_errors as exc:
            error = self._wrap(exc)
            raise error from (None if isinstance(error, SchemaMissing) else exc)

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """A read on its own (autocommitted; within `mq init`'s transaction, guarded)."""
        with self._errors():
            cursor = self._cursor()
            try:
                if self.schema.in_transaction:
                    return self.schema.guarded_read(cursor, sql, params)
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()

    def _change(self, sql: str, params: Sequence[object]) -> int:
        """One autocommitted statement; deadlocks and lock waits are retried."""
        return self._retried(lambda: Tx(self._cursor()).change(sql, params))

    def _ack_change(self, sql: str, params: Sequence[object]) -> int:
        """:meth:`_change` for a drain's acknowledgements and heartbeats: a dialect
        may check less after each of these (SQLite's -wal guard)."""
        return self._change(sql, params)

    def _write_rows(self, sql: str, params: Sequence[object]) -> list[Any]:
        """One autocommitted statement that changes rows and returns some (RETURNING)."""
        return self._retried(lambda: Tx(self._cursor()).rows(sql, params))

    def _retried(self, run: Callable[[], T]) -> T:
        retries = 0 if self.schema.in_transaction else self.retries  # see sqlschema.py
        for attempt in range(retries + 1):
            try:
                with self._errors():
                    return run()
            except Deadlock:
                if attempt == retries:
                    raise
                backoff(attempt)
        raise AssertionError("unreachable")

    def _transaction(self, body: Callable[[Tx], T]) -> T:
        """Run ``body(tx)`` in a transaction, retrying deadlocks and lock waits.

        A transaction whose COMMIT fails changed nothing (on Galera too: a
        certification failure rolls it back), so running it again is safe.
        """
        for attempt in range(self.retries + 1):
            try:
                with self._errors():
                    self._begin()
                    try:
                        cursor = self._cursor()
                        try:
                            result = body(Tx(cursor))
                        finally:
                            cursor.close()
                        self._commit()
                        return result
                    except BaseException:
                        self._rollback()
                        raise
            except Deadlock:
                if attempt == self.retries:
                    raise
                backoff(attempt)
        raise AssertionError("unreachable")

    def _with_ids(self, name: str, ids: Sequence[int]) -> str:
        return self._sql[name].replace("{ids}", placeholders(len(ids), self.mark))

    # -- producing --------------------------------------------------------------

    def check_sizes(self, payloads: Sequence[bytes]) -> None:
        """Raise PayloadTooLarge before anything is sent (a dialect words it)."""

    def enqueue(
        self,
        queue: str,
        payloads: Sequence[bytes],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
        wake: bool = True,
    ) -> list[int | None]:
        self.check_sizes(payloads)
        when = self._shift(delay)

        def body(tx: Tx) -> list[int | None]:
            ids = self._insert(
                tx, queue, payloads, when, priority, unique_key, initial_status(delay)
            )
            if wake and not delay and any(i is not None for i in ids):
                self._wake(tx, queue)
            return ids

        return commits.store_once(
            self._transaction, body, self._commit_proof, self._committed, self.reconnect,
            len(payloads),
        )  # fmt: skip

    def _commit_proof(self, tx: Tx) -> object:
        """Inside the enqueue's transaction: what tells later whether it committed
        (PostgreSQL: its transaction id); None where the ids alone must tell."""
        return None

    def _committed(self, proof: object, ids: list[int | None]) -> bool | None:
        """After a COMMIT whose answer was lost: did it commit (commits.py)?"""
        self.reconnect()
        return commits.rows_committed(
            ids, lambda new: self._rows(self._with_ids("ids_present", new), new)[0][0]
        )

    def _wake(self, tx: Tx, queue: str) -> None:
        """Inside the enqueue's transaction: tell waiting drains on any host (a
        dialect that can: PostgreSQL's NOTIFY, delivered at commit)."""

    # -- draining ---------------------------------------------------------------

    def _claim_rows(self, tx: Tx, queue: str, limit: int, owner: str) -> list[Any]:
        """Select and mark in ``tx`` (claims.select_and_mark; PostgreSQL: one statement)."""
        select = self._sql[self._claim_select()]
        return select_and_mark(tx, select, self._with_ids, queue, limit, owner)

    def _claim_select(self) -> str:
        return "claim_select"

    def _claim(self, queue: str, limit: int, owner: str) -> list[Any]:
        """The claimed rows, in claim order (PostgreSQL: one statement, no BEGIN)."""
        return claim_in(self._transaction, lambda tx: self._claim_rows(tx, queue, limit, owner))

    def promote(self, queue: str) -> int:
        """Make up to 1,000 of ``queue``'s due delayed messages ready; how many."""
        self._promoted[queue] = time.monotonic()
        return self._change(self._sql["promote"], (queue,))

    def _promote_due(self, queue: str) -> bool:
        """Promote if this connection has not for PROMOTE_EVERY; whether it did."""
        if time.monotonic() - self._promoted.get(queue, -PROMOTE_EVERY) < PROMOTE_EVERY:
            return False
        self.promote(queue)
        return True

    def _claim_promoting(
        self, queue: str, limit: int, owner: str, first: Callable[[], list[Any]] | None = None
    ) -> list[Any]:
        # Claims read ready rows only (no cost from rows not due): a due delayed message
        # is ready within PROMOTE_EVERY while the queue is busy, and before any claim
        # comes back short of it. ``first``: the first claim (claims.claim_acking).
        promoted_now = self._promote_due(queue)
        rows = first() if first is not None else self._claim(queue, limit, owner)
        return claims.topped_up(self, rows, queue, limit, owner, promoted_now)

    def claim(self, queue: str, limit: int, owner: str) -> list[Message]:
        return self._messages_of(self._claim_promoting(queue, limit, owner), owner)

    claim_acking = claims.claim_acking  # group_ack's batch end: one transaction

    def claim_limited(
        self, queue: str, limit: int, owner: str, per_second: float, slept: float
    ) -> tuple[list[Message], float | None]:
        def taken(want: int, slept: float) -> tuple[list[Any], float | None]:
            def rows(tx: Tx, n: int) -> list[Any]:
                return self._claim_rows(tx, queue, n, owner)

            def claim(tx: Tx) -> tuple[list[Any], float | None]:
                return self.limits.claim_with_tokens(tx, rows, queue, want, (per_second, slept))

            return claim_in(self._transaction, claim, itemgetter(0))

        promoted_now = self._promote_due(queue)
        rows, throttled = taken(limit, slept)
        with unknown_if_lost(rows):  # those rows are held, unseen, if what follows is lost
            if throttled is None and len(rows) < limit and not promoted_now and self.promote(queue):
                more, throttled = taken(limit - len(rows), 0.0)
                rows += more
        return self._messages_of(rows, owner), throttled

    def _messages_of(self, rows: list[Any], owner: str) -> list[Message]:
        return claimed(rows, owner, self._time)

    def ack_success(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        if retention > 0 and message.unique_key is not None:
            params = (self._shift(retention), message.id, owner)
            return self._ack_change(self._sql["ack_tombstone"], params) == 1
        return self._ack_change(self._sql["ack_delete"], (message.id, owner)) == 1

    def ack_success_many(self, ids: Sequence[int], owner: str) -> int:
        return self._ack_change(self._with_ids("ack_delete_many", ids), (*ids, owner))

    def ack_failure(
        self, message: Message, owner: str, error: str, retry_in: float, failed: bool
    ) -> bool:
        status = Stored.FAILED if failed else initial_status(retry_in)
        params = (status, self._storable(error), self._shift(retry_in), message.id, owner)
        return self._ack_change(self._sql["ack_failure"], params) == 1

    def _storable(self, value: str) -> str:
        """A handler's text (its error) as this database can store it."""
        return value

    def heartbeat(self, ids: Sequence[int], owner: str) -> int:
        return self._ack_change(self._with_ids("heartbeat", ids), (*ids, owner)) if ids else 0

    def release(self, ids: Sequence[int], owner: str) -> int:
        return self._change(self._with_ids("release", ids), (*ids, owner)) if ids else 0

    def owned(self, ids: Sequence[int], owner: str) -> list[int]:
        if not ids:
            return []
        return [int(row[0]) for row in self._rows(self._with_ids("owned", ids), (*ids, owner))]

    def release_owner(self, queue: str, owner: str, keep: Sequence[int] = ()) -> int:
        if not keep:
            return self._change(self._sql["release_owner"], (queue, owner))
        return self._change(self._with_ids("release_owner_keeping", keep), (queue, owner, *keep))

    def purge_tombstones(self, queue: str) -> int:
        return self._change(self._sql["purge_tombstones"], (queue,))

    # -- liveness (mq_cli/backends/liveness.py) ---------------------------------------------

    def probe(self) -> None:
        self._rows(self._sql["probe"])

    def processing_owners(self, queue: str) -> list[str]:
        rows = self._rows(self._sql["processing_owners"], (queue,))
        return [str(row[0]) for row in rows if row[0] is not None]

    def mark_dead(self, queue: str, owner: str) -> int:
        return self._change(self._sql["mark_dead"], (queue, owner))

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        return [
            " ".join(str(v) for v in row)
            for row in self._rows(self._sql["explain_claim"], (queue, limit))
        ]
