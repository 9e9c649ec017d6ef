"""SQLite dialect: one file, WAL mode, a long busy timeout, tiny write transactions."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cached_property, lru_cache
from typing import Any

from mq_cli.backends import bloat
from mq_cli.backends.base import Caps, Found
from mq_cli.backends.dialects import Dialect, OpenOptions, register
from mq_cli.backends.inserts import initial_status, insert_each, insert_rows
from mq_cli.backends.sqlcore import SqlBackend, Tx
from mq_cli.backends.sqlfiles import queries as dialect_queries
from mq_cli.backends.sqlite import url as sqlite_url
from mq_cli.backends.sqlite.heads import SqliteOperate
from mq_cli.backends.sqlite.wal import WalGuard
from mq_cli.core.dburl import DatabaseSettings
from mq_cli.core.errors import DatabaseError, MqError, SchemaMissing
from mq_cli.core.states import Stored
from mq_cli.core.version import SCHEMA_VERSION

# Two writer processes on one file are served unfairly (FIELD-NOTES, trap 5): a
# claim may wait seconds for its turn. Only a long busy timeout keeps
# "database is locked" from reaching the user.
BUSY_TIMEOUT = 60.0
# Parameters per statement: 32766 since SQLite 3.32, 999 before.
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def offset(seconds: float) -> str:
    """A strftime modifier moving 'now' by ``seconds``."""
    return f"{seconds:+.3f} seconds"


@lru_cache(maxsize=4096)  # a batch enqueued together shares its times: claims parse fewer
def parse_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def queries(table: str) -> dict[str, str]:
    return dialect_queries("sqlite", table, now=_NOW)


def ddl(table: str) -> list[str]:
    sql = queries(table)
    return [sql[name] for name in SqliteBackend.ddl_names]


class SqliteBackend(SqlBackend):
    kind = dialect = "sqlite"
    #: every drain of a file runs on its host; PRAGMA quick_check is cheap
    caps = Caps(file_locks=True, integrity_check=True)
    mark = "?"
    driver_errors = (sqlite3.DatabaseError,)
    ddl_names = (
        "create_table", "create_claim_index", "create_unique_index", "create_due_index",
        "create_meta", *SqlBackend.runlog_ddl, *SqlBackend.limits_ddl,
    )  # fmt: skip
    max_payload = 1_000_000_000 - 1024
    #: one writer at a time (BEGIN IMMEDIATE): nothing deadlocks, nothing to retry
    retries = 0

    @cached_property
    def operate(self) -> SqliteOperate:  # payload heads by blob handles (heads.py)
        return SqliteOperate(self, self.dead_owners)

    def __init__(
        self,
        settings: DatabaseSettings,
        table: str,
        *,
        create: bool = True,
        auto_init: bool = True,
        create_in_existing: bool = True,
    ):
        """``create``: make the file and the schema if missing (``auto_init`` False:
        only the file's directory, `mq init` makes the rest); ``create_in_existing``
        False: only in a file this call made (a reader never turns an empty file or
        another program's database into a queue)."""
        assert settings.path
        self.settings = settings
        self._promoted = {}
        self.table = table
        self.path = settings.path
        self._sql = queries(table)
        self._wal = WalGuard(self.path)
        if create:
            directory = os.path.dirname(os.path.abspath(self.path))
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(
                    f"cannot create the directory for {self.path}: {exc.strerror}"
                ) from None
        elif not os.path.exists(self.path):
            raise SchemaMissing(f"{self.path} does not exist: run `mq init` first")
        existed = os.path.exists(self.path)
        with self._errors():
            self.conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            version = self.schema_version()
            if version is None and existed and not create_in_existing:
                # Before the WAL pragma below, which would write to the file.
                self.conn.close()
                raise SchemaMissing(
                    f"{self.path} has no mq schema (no table {table!r}; an empty file?): "
                    "run `mq init` if it is the right file"
                )
            if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.schema_version()  # a read: the connection has opened -wal and -shm
        self._wal.remember()
        if create and auto_init and (version is None or version < SCHEMA_VERSION):
            # The embedded default needs no setup, upgrades included.
            self.init_schema()

    # -- the dialect ------------------------------------------------------------

    def _wrap(self, exc: BaseException) -> MqError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "no such table" in text:
            return SchemaMissing(
                f"the queue table {self.table!r} is missing in {self.path}: run `mq init`"
            )
        return DatabaseError(f"SQLite database {self.path}: {text}")

    def _begin(self) -> None:
        # The write lock up front: no upgrade deadlocks between two writers.
        self.conn.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._wal.check()  # already gone: do not commit into a lost file
        self.conn.execute("COMMIT")
        # Deleted between our check and the commit's end: the commit is in the lost file.
        self._wal.check()

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _time(self, value: Any) -> datetime | None:
        return parse_time(value)

    def _shift(self, seconds: float) -> object:
        return offset(seconds)  # strftime('%Y-%m-%d %H:%M:%f', 'now', ?)

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._errors():
            return self.conn.execute(sql, params).fetchall()

    def _change(self, sql: str, params: Sequence[object]) -> int:
        # Autocommit: the statement is its own transaction; checked after it, as a
        # committed write must not be reported done if it may have gone into a
        # deleted -wal file.
        count = self._execute(sql, params)
        self._wal.check()
        return count

    def _ack_change(self, sql: str, params: Sequence[object]) -> int:
        # The -wal check (~7 µs of an ~90 µs acknowledgement) at most every
        # ACK_EVERY s: an acknowledgement lost with a deleted file only runs its
        # message again, and the drain's next claim checks at its commit.
        count = self._execute(sql, params)
        self._wal.check_soon()
        return count

    def _execute(self, sql: str, params: Sequence[object]) -> int:
        # Once per message: plain try, not the _errors() context manager (~2 µs).
        try:
            return int(self.conn.execute(sql, params).rowcount)
        except sqlite3.DatabaseError as exc:
            error = self._wrap(exc)
            raise error from (None if isinstance(error, SchemaMissing) else exc)

    def server_mode(self) -> tuple[bool, str]:
        return True, f"SQLite {sqlite3.sqlite_version}, WAL, drains on this host only"

    def close(self) -> None:
        self.conn.close()

    def integrity(self) -> list[str]:
        # quick_check reads every page (not the index contents): O(size), so only in `mq check`.
        rows = self._rows(self._sql["quick_check"])
        found = [line for row in rows for line in str(row[0]).splitlines()]
        return [] if found == ["ok"] else [x for x in found if not x.startswith("***")]

    def health(self) -> list[Found]:
        pages, free, size = self._rows(self._sql["free_pages"])[0]
        return [bloat.sqlite_free_pages(self.path, int(pages), int(free), int(size))]

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        return [str(row[-1]) for row in self._rows(self._sql["explain_claim"], (queue, limit))]

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
        return insert_messages(tx, self._sql, queue, payloads, when, priority, unique_key, status)


def duplicate(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.IntegrityError)


def insert_messages(
    tx: Tx,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    when: object,
    priority: int,
    unique_key: str | None,
    status: Stored,
) -> list[int | None]:
    """Insert inside the caller's transaction (ours, or an application's)."""
    if unique_key is not None:
        return insert_each(tx, sql, queue, payloads, when, priority, unique_key, duplicate, status)
    per_statement = max(1, min(1000, _MAX_VARIABLES // 6))
    chunking = (per_statement, 1 << 62, len)
    return insert_rows(
        tx, sql, queue, payloads, when, priority, chunking, _consecutive, status=status
    )


def _consecutive(tx: Tx, statement: str, params: list[object], count: int) -> list[int]:
    last = tx.insert(statement, params)
    assert last is not None
    # One statement under the write lock: AUTOINCREMENT ids are consecutive.
    return list(range(last - count + 1, last + 1))


def insert_in_transaction(
    conn: sqlite3.Connection,
    table: str,
    queue: str,
    payload: bytes,
    delay: float,
    priority: int,
    unique_key: str | None,
    notify: bool = True,
) -> int | None:
    """One message inside an application's sqlite3 transaction (never committed here)."""
    try:
        tx = Tx(conn.cursor())
        return insert_messages(
            tx, queries(table), queue, [payload], offset(delay), priority, unique_key,
            initial_status(delay),
        )[0]  # fmt: skip
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            raise SchemaMissing(f"the queue table {table!r} is missing: run `mq init`") from None
        raise DatabaseError(f"SQLite: {exc}") from exc


def _open(settings: DatabaseSettings, table: str, options: OpenOptions) -> SqliteBackend:
    # The embedded default must work with zero setup: the schema is made unless told not.
    return SqliteBackend(
        settings,
        table,
        create=True if options.create is None else options.create,
        auto_init=options.auto_init,
        create_in_existing=not options.reading,
    )


register(
    Dialect(
        url=sqlite_url.FORM,
        backend=SqliteBackend,
        open=_open,
        ddl=ddl,
        insert_in_transaction=insert_in_transaction,
        connection_modules=("sqlite3",),
        driver="sqlite3",
    )
)
