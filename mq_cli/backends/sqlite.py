"""SQLite backend: one file, WAL mode, a long busy timeout, tiny write transactions."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache

from ..dburl import DatabaseSettings
from ..errors import DatabaseError, SchemaMissing
from ..models import Message, QueueStats
from .base import SCHEMA_VERSION, load_queries, placeholders
from .sqlite_operate import SqliteOperate
from .sqlite_wal import WalGuard

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
    return {
        name: sql.replace("{table}", table).replace("{now}", _NOW)
        for name, sql in load_queries("sqlite").items()
    }


def ddl(table: str) -> list[str]:
    sql = queries(table)
    return [
        sql[n] for n in ("create_table", "create_claim_index", "create_unique_index", "create_meta")
    ]


class SqliteBackend(SqliteOperate):
    kind = "sqlite"
    max_payload = 1_000_000_000 - 1024

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

    # -- plumbing ---------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            error = self._error(exc)
            raise error from (None if isinstance(error, SchemaMissing) else exc)

    def _error(self, exc: sqlite3.DatabaseError) -> DatabaseError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "no such table" in text:
            return SchemaMissing(
                f"the queue table {self.table!r} is missing in {self.path}: run `mq init`"
            )
        return DatabaseError(f"SQLite database {self.path}: {text}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the lock up front (no upgrade deadlocks)."""
        with self._errors():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
                self._wal.check()  # already gone: do not commit into a lost file
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        # Deleted between our check and the commit's end: the commit is in the lost file.
        self._wal.check()

    def server_mode(self) -> tuple[bool, str]:
        return True, f"SQLite {sqlite3.sqlite_version}, WAL, drains on this host only"

    def close(self) -> None:
        self.conn.close()

    # -- schema -----------------------------------------------------------

    def ddl(self) -> list[str]:
        return ddl(self.table)

    def schema_version(self) -> int | None:
        try:
            row = self.conn.execute(self._sql["schema_version"]).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise DatabaseError(f"SQLite database {self.path}: {exc}") from exc
        return int(row[0]) if row else None

    # -- producing --------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        payloads: Sequence[bytes],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
    ) -> list[int | None]:
        with self._write() as conn:
            return insert_messages(conn, self._sql, queue, payloads, delay, priority, unique_key)

    # -- draining ---------------------------------------------------------

    def claim(self, queue: str, limit: int, owner: str) -> list[Message]:
        with self._write() as conn:
            rows = conn.execute(self._sql["claim_select"], (queue, limit)).fetchall()
            if rows:
                conn.execute(
                    self._sql["claim_mark"].replace("{ids}", placeholders(len(rows), "?")),
                    (owner, *[row[0] for row in rows]),
                )
        return [
            Message(
                id=row[0],
                queue=row[1],
                status="processing",
                priority=row[2],
                error_count=row[3],
                created_at=parse_time(row[4]),  # type: ignore[arg-type]
                available_at=parse_time(row[5]),  # type: ignore[arg-type]
                unique_key=row[6],
                payload=bytes(row[7]),
                owner=owner,
            )  # fmt: skip
            for row in rows
        ]

    def _change(self, sql: str, params: Sequence[object]) -> int:
        # Once per message: plain try, not the _errors() context manager (~2 µs).
        # Autocommit: the statement is its own transaction; checked after it (once:
        # ~7 µs of an ~90 µs acknowledgement), as a committed write must not be reported
        # done if it may have gone into a deleted -wal file.
        try:
            count = self.conn.execute(sql, params).rowcount
        except sqlite3.DatabaseError as exc:
            error = self._error(exc)
            raise error from (None if isinstance(error, SchemaMissing) else exc)
        self._wal.check()
        return count

    def ack_success(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        if retention > 0 and message.unique_key is not None:
            sql, params = self._sql["ack_tombstone"], (offset(retention), message.id, owner)
            return self._change(sql, params) == 1
        return self._change(self._sql["ack_delete"], (message.id, owner)) == 1

    def ack_success_many(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["ack_delete_many"].replace("{ids}", placeholders(len(ids), "?"))
        return self._change(sql, (*ids, owner))

    def ack_failure(
        self, message: Message, owner: str, error: str, retry_in: float, failed: bool
    ) -> bool:
        params = ("failed" if failed else "ready", error, offset(retry_in), message.id, owner)
        return self._change(self._sql["ack_failure"], params) == 1

    def heartbeat(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["heartbeat"].replace("{ids}", placeholders(len(ids), "?"))
        return self._change(sql, (*ids, owner)) if ids else 0

    def release(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["release"].replace("{ids}", placeholders(len(ids), "?"))
        return self._change(sql, (*ids, owner)) if ids else 0

    def owned(self, ids: Sequence[int], owner: str) -> list[int]:
        if not ids:
            return []
        sql = self._sql["owned"].replace("{ids}", placeholders(len(ids), "?"))
        with self._errors():
            return [row[0] for row in self.conn.execute(sql, (*ids, owner)).fetchall()]

    def release_owner(self, queue: str, owner: str) -> int:
        return self._change(self._sql["release_owner"], (queue, owner))

    def purge_tombstones(self, queue: str) -> int:
        return self._change(self._sql["purge_tombstones"], (queue,))

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        with self._errors():
            rows = self.conn.execute(self._sql["explain_claim"], (queue, limit)).fetchall()
        return [str(row[-1]) for row in rows]

    # -- reading ----------------------------------------------------------

    def stats(
        self, queue: str | None, stalled_after: Callable[[str], float]
    ) -> dict[str, QueueStats]:
        sql = self._sql["stats"].replace("{queue_filter}", "AND queue = ?" if queue else "")
        with self._errors():
            rows = self.conn.execute(sql, (queue,) if queue else ()).fetchall()
            result: dict[str, QueueStats] = {}
            for name, ready, delayed, processing, failed, oldest in rows:
                stalled = 0
                if processing:
                    stalled = self.conn.execute(
                        self._sql["count_stalled"], (name, offset(-stalled_after(name)))
                    ).fetchone()[0]
                result[name] = QueueStats(
                    ready=ready,
                    delayed=delayed,
                    processing=processing - stalled,
                    stalled=stalled,
                    failed=failed,
                    oldest_ready_seconds=max(oldest, 0.0) if oldest is not None else None,
                )
            return result


def insert_messages(
    conn: sqlite3.Connection,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    delay: float,
    priority: int,
    unique_key: str | None,
) -> list[int | None]:
    """Insert inside the caller's transaction (ours, or an application's)."""
    when = offset(delay)
    if unique_key is not None:
        ids: list[int | None] = []
        for payload in payloads:
            conn.execute(sql["purge_expired_key"], (queue, unique_key))
            try:
                cursor = conn.execute(
                    sql["insert"].replace("{values}", sql["insert_row"]),
                    (queue, priority, when, unique_key, payload),
                )
            except sqlite3.IntegrityError:
                ids.append(None)  # the key is taken: skipped, as documented
            else:
                ids.append(cursor.lastrowid)
        return ids
    result: list[int | None] = []
    per_statement = max(1, min(1000, _MAX_VARIABLES // 5))
    for start in range(0, len(payloads), per_statement):
        chunk = payloads[start : start + per_statement]
        values = ",".join([sql["insert_row"]] * len(chunk))
        params: list[object] = []
        for payload in chunk:
            params += (queue, priority, when, None, payload)
        cursor = conn.execute(sql["insert"].replace("{values}", values), params)
        last = cursor.lastrowid
        assert last is not None
        # One statement under the write lock: AUTOINCREMENT ids are consecutive.
        result.extend(range(last - len(chunk) + 1, last + 1))
    return result


def insert_in_transaction(
    conn: sqlite3.Connection,
    table: str,
    queue: str,
    payload: bytes,
    delay: float,
    priority: int,
    unique_key: str | None,
) -> int | None:
    """One message inside an application's sqlite3 transaction (never committed here)."""
    try:
        return insert_messages(conn, queries(table), queue, [payload], delay, priority, unique_key)[
            0
        ]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            raise SchemaMissing(f"the queue table {table!r} is missing: run `mq init`") from None
        raise DatabaseError(f"SQLite: {exc}") from exc
