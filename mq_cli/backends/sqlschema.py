"""The schema's statements for every SQL backend: what `mq init` runs, and how two
inits of one table at once stay apart.

A part of every SQL backend (parts.SchemaPart), like sqlops.py; what to create
or migrate is decided in schema.py (:func:`~mq_cli.backends.schema.migrate`,
which the backend's ``_migrate`` runs).

`mq init` runs from many hosts at once (a deployment that runs it on every host)
and on SQLite on first use by every command, so migrate() must never run twice
at once against one table: both would find the table missing (or a column, or
an index) and both create it, and CREATE ... IF NOT EXISTS is not safe against a
concurrent CREATE (PostgreSQL: a raw unique violation in its catalog). So:

- where DDL is transactional (PostgreSQL, SQLite), init is one transaction whose
  first statement waits for any other init of the table: ``init_lock``, a
  transaction-scoped advisory lock on PostgreSQL (it holds through a pooler in
  transaction mode, as the whole init is one transaction), BEGIN IMMEDIATE's
  write lock on SQLite. The next init then finds everything done;
- where each DDL statement commits at once (MySQL, ``caps.ddl_commits``), init
  holds ``init_lock`` (a named GET_LOCK, released at the end) while it runs;
- and where no such lock exists (Galera: GET_LOCK is refused in a cluster) or
  another process changed the schema without it (an older mq), a statement that
  finds done what it was to do (``_schema_race``) makes init look again, from
  the start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from mq_cli.backends.plumbing import Executor, Tx
from mq_cli.backends.traits import Shape
from mq_cli.core.errors import ConnectionLost, DatabaseError, SchemaMissing

log = logging.getLogger("mq")

#: times `mq init` looks again after another process's schema change won a race
SCHEMA_RACES = 5
#: `mq init` waits for another init's session lock (mysql/mysql.sql, init_lock) this many
#: times this many seconds (one wait stays under PyMySQL's 120 s read timeout)
INIT_TRIES, INIT_WAIT = 10, 60


class Owner(Executor, Protocol):
    """The executor of a backend whose schema this part makes, and the dialect's say
    in it."""

    def _migrate(self) -> list[str]:
        """What init does under its lock (schema.migrate; a dialect may add to it)."""

    def _schema_race(self, exc: BaseException) -> bool:
        """Whether a driver error says another process made what init was making
        (a table, a column, an index that exists, one to drop that does not)."""


class SqlSchema:
    """Schema reads and `mq init` over a dialect's executor."""

    def __init__(self, db: Owner) -> None:
        self.db = db
        #: inside init's one transaction: a failed statement has aborted it, so the
        #: transaction, not the statement, is what runs again (sqlcore's _retried)
        self.in_transaction = False

    def init_schema(self) -> list[str]:
        for attempt in range(SCHEMA_RACES):
            try:
                return self._schema_exclusive(self.db._migrate)
            except DatabaseError as exc:
                if attempt + 1 == SCHEMA_RACES or not any(map(self.db._schema_race, _causes(exc))):
                    raise
        raise AssertionError("unreachable")

    def _schema_exclusive(self, run: Callable[[], list[str]]) -> list[str]:
        """``run()`` while no other `mq init` of this table runs (see the module's doc)."""
        if self.db.caps.ddl_commits:
            return self._schema_locked(run)

        def body(tx: Tx) -> list[str]:
            if "init_lock" in self.db._sql:
                tx.rows(self.db._sql["init_lock"], (self._lock_token(),))
            self.in_transaction = True
            try:
                return run()
            finally:
                self.in_transaction = False

        return self.db._transaction(body)

    def guarded_read(self, cursor: Any, sql: str, params: Sequence[object]) -> list[Any]:
        """A read within init's one transaction that may fail, as it may outside one (a
        table not made yet: schema_version(), the run log's probes): in a savepoint, so
        that its error does not abort the transaction (PostgreSQL)."""
        cursor.execute("SAVEPOINT mq_read")
        try:
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
        except BaseException:
            cursor.execute("ROLLBACK TO SAVEPOINT mq_read")
            raise
        cursor.execute("RELEASE SAVEPOINT mq_read")
        return rows

    def _schema_locked(self, run: Callable[[], list[str]]) -> list[str]:
        """``run()`` holding init_lock, a session lock (a dialect whose DDL commits at once)."""
        token = (self._lock_token(),)
        got: object = 0
        for _ in range(INIT_TRIES):  # each wait shorter than the driver's read timeout
            try:
                got = self.db._rows(self.db._sql["init_lock"], (*token, INIT_WAIT))[0][0]
            except ConnectionLost:
                raise
            except DatabaseError as exc:  # Galera refuses GET_LOCK: the race retries remain
                got = exc
            if got is None or isinstance(got, DatabaseError):
                log.info("no lock for `mq init` here (%s): it looks again after a race", got)
                return run()
            if got == 1:
                break
            log.info("waiting for another `mq init` of table %s to finish", self.db.table)
        if got != 1:
            raise DatabaseError(
                f"another `mq init` of table {self.db.table} has been running for "
                f"{INIT_TRIES * INIT_WAIT // 60} minutes: try again once it has finished"
            )
        try:
            return run()
        finally:
            try:
                self.db._rows(self.db._sql["init_unlock"], token)
            except DatabaseError:
                pass  # the session is gone, and its lock with it

    def _lock_token(self) -> str:
        """What init_lock's key or name is derived from."""
        return f"init:{self.db.table}"

    def schema_version(self) -> int | None:
        try:
            rows = self.db._rows(self.db._sql["schema_version"])
        except SchemaMissing:
            return None
        return int(rows[0][0]) if rows else None

    def table_shape(self) -> Shape | None:
        rows = self.db._rows(self.db._sql["table_columns"], (self.db.table,))
        if not rows:
            return None
        indexes = self.db._rows(self.db._sql["table_indexes"], (self.db.table,))
        return Shape(
            frozenset(str(row[0]) for row in rows),
            {str(name): bool(unique) for name, unique in indexes},
            None if rows[0][1] is None else str(rows[0][1]),
        )

    def run_schema(self, name: str, params: Sequence[object] = ()) -> None:
        self.db._change(self.db._sql[name], params)

    def run_schema_statement(self, statement: str) -> None:
        self.db._change(statement, ())

    def probe_write(self) -> None:
        # _transaction() rolls back on an exception: raise one once the insert worked.
        def body(tx: Tx) -> None:
            tx.change(self.db._sql["probe_write"])
            raise _RolledBack

        try:
            self.db._transaction(body)
        except _RolledBack:
            pass


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The errors ``exc`` was raised from (schema.py words some again, with a hint)."""
    while (cause := exc.__cause__) is not None:
        yield cause
        exc = cause


class _RolledBack(Exception):
    """Ends the probe's transaction the way a failure would: with a ROLLBACK."""
