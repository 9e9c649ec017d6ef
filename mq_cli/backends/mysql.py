"""MySQL/MariaDB backend through PyMySQL: version detection, error wrapping, retries."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

import pymysql
import pymysql.cursors

from ..dburl import DatabaseSettings
from ..errors import (
    ConfigError,
    ConnectionLost,
    DatabaseError,
    Deadlock,
    MqError,
    PayloadTooLarge,
    SchemaMissing,
)
from ..models import Message, QueueStats
from .base import load_queries, placeholders
from .mysql_operate import MysqlOperate

T = TypeVar("T")

ER_ACCESS_DENIED = 1045
ER_BAD_DB = 1049
ER_NO_SUCH_TABLE = 1146
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_NET_PACKET_TOO_LARGE = 1153
ER_DUP_ENTRY = 1062
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
LOST = {2006, 2013, 2014, 2055, 0}  # gone away, lost during query, out of sync, lost, closed
CANNOT_CONNECT = {2002, 2003, 2005}
RETRYABLE = {ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT}
#: every statement of sql/mysql.sql is written for this mode, whatever the server's
SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"
#: tries of a statement that deadlocked, on one server and on a Galera node
#: (where another node's concurrent write to the same row is a 1213 at COMMIT)
RETRIES = 8
GALERA_RETRIES = 40
_ESCAPED = b"\0\n\r\x1a\\'\""  # each takes two bytes in PyMySQL's SQL text


def escaped_size(payload: bytes) -> int:
    """Bytes the payload takes inside PyMySQL's SQL text (`_binary'...'`)."""
    # One pass in C (per message, three times on the enqueue path).
    return 2 * len(payload) - len(payload.translate(None, _ESCAPED)) + 10


def max_payload(max_packet: int) -> int:
    """The largest payload a server with this max_allowed_packet stores.

    Measured on MariaDB 10.11: a statement whose values add up to more than
    max_allowed_packet / 2 - 16 bytes makes the server drop the connection,
    however they are escaped; 1 KiB leaves room for the rest of the statement.
    """
    return max_packet // 2 - 1024


def too_large_hint(max_packet: int) -> str:
    return (
        f"max_allowed_packet = {max_packet} allows payloads up to {max_payload(max_packet)} "
        "bytes, half of it; raise max_allowed_packet on the server for larger ones"
    )


def utc(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=timezone.utc) if moment is not None else None


def _text(value: bytes | str | None) -> str | None:
    """unique_key is stored as bytes (no collation, no padding): back to text."""
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def queries(table: str) -> dict[str, str]:
    return {name: sql.replace("{table}", table) for name, sql in load_queries("mysql").items()}


def ddl(table: str) -> list[str]:
    sql = queries(table)
    return [sql["create_table"], sql["create_meta"]]


class ServerInfo:
    """What the server supports, read once per connection."""

    def __init__(
        self, version: str, max_packet: int, increment: int, lock_mode: int, galera: bool = False
    ):
        self.version_text = version
        #: a Galera cluster node: row locks are local, conflicts come as 1213 at COMMIT
        self.galera = galera
        self.mariadb = "mariadb" in version.lower()
        match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
        self.version = tuple(int(x) for x in match.groups()) if match else (0, 0, 0)
        self.max_packet = max_packet
        self.increment = increment
        self.lock_mode = lock_mode

    @property
    def skip_locked(self) -> bool:
        return self.version >= ((10, 6, 0) if self.mariadb else (8, 0, 1))

    @property
    def returning(self) -> bool:
        return self.mariadb and self.version >= (10, 5, 0)


class MysqlBackend(MysqlOperate):
    kind = "mysql"

    def __init__(self, settings: DatabaseSettings, table: str, *, create: bool = False):
        self.settings = settings
        #: claim with plain FOR UPDATE even where SKIP LOCKED exists (tests force the old path)
        self.force_locking_claim = False
        self.table = table
        self._sql = queries(table)
        self.retries = RETRIES
        self.conn = self._connect()
        if create and self.schema_version() is None:
            self.init_schema()

    # -- plumbing ---------------------------------------------------------

    def _connect(self) -> pymysql.connections.Connection:
        s = self.settings
        options: dict[str, Any] = {
            "user": s.user or "root",
            "password": s.password or "",
            "database": s.database,
            "connect_timeout": s.connect_timeout,
            "read_timeout": 120,
            "write_timeout": 120,
            "autocommit": True,
            "charset": "utf8mb4",
            # Claims under REPEATABLE READ lock rows they pass over (FIELD-NOTES, trap 2).
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            # Sent before init_command: the server's sql_mode could otherwise change
            # what mq's SQL means (ORACLE: BEGIN opens a block; EMPTY_STRING_IS_NULL:
            # a tombstone's '' payload becomes NULL).
            "sql_mode": SQL_MODE,
        }
        if s.unix_socket:
            options["unix_socket"] = s.unix_socket
        else:
            options["host"] = s.host
            options["port"] = s.port
        if s.ssl:
            import ssl

            try:
                context = ssl.create_default_context(cafile=s.ssl_ca)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"database ssl: cannot use CA file {s.ssl_ca}: {exc}") from None
            if not s.ssl_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            options["ssl"] = context
        else:
            # PyMySQL otherwise probes TLS on every connect (FIELD-NOTES, trap 4).
            options["ssl_disabled"] = True
        try:
            conn = pymysql.connect(**options)
            with conn.cursor() as cursor:
                cursor.execute(self._sql["session_settings"])
                try:
                    cursor.execute(self._sql["server_info"])
                except pymysql.MySQLError as exc:
                    if error_code(exc) != ER_UNKNOWN_SYSTEM_VARIABLE:
                        raise
                    cursor.execute(self._sql["server_info_mysql"])  # MySQL: no @@wsrep_on
                row = cursor.fetchone()
        except pymysql.MySQLError as exc:
            raise self._wrap(exc, connecting=True) from exc
        except OSError as exc:
            raise DatabaseError(f"cannot connect to the database at {s.describe()}: {exc}") from exc
        self.server = ServerInfo(
            str(row[0]), int(row[1]), int(row[2]), int(row[3]), galera=bool(int(row[4] or 0))
        )
        if self.server.galera:
            # Certification conflicts between nodes are normal traffic on a cluster:
            # retry them for longer than a single server's rare deadlocks.
            self.retries = GALERA_RETRIES
            import logging

            logging.getLogger("mq").info(
                "%s is a Galera cluster node: conflicts with other nodes are retried "
                "(up to %d times)", s.describe(), GALERA_RETRIES,
            )  # fmt: skip
        self.max_payload = max_payload(self.server.max_packet)
        return conn

    #: the unique-key index's column, NULL without a key (see create_table)
    extra_columns = ("unique_slot",)

    def unique_index_columns(self) -> list[str]:
        params = (self.table, f"{self.table}_unique")
        return [str(row[0]) for row in self._rows(self._sql["unique_index_columns"], params)]

    def server_mode(self) -> tuple[bool, str]:
        info = self.server
        kind = "MariaDB" if info.mariadb else "MySQL"
        claim = "SKIP LOCKED claims" if info.skip_locked else "locking claims (no SKIP LOCKED)"
        if not info.galera:
            return True, f"{kind} {info.version_text}, single server, {claim}"
        with self._errors(), self.conn.cursor() as cursor:
            cursor.execute(self._sql["galera_status"])
            status = {str(name).lower(): str(value) for name, value in cursor.fetchall()}
        size = status.get("wsrep_cluster_size", "?")
        state = status.get("wsrep_local_state_comment", "?")
        primary = status.get("wsrep_cluster_status", "?")
        healthy = state == "Synced" and primary == "Primary"
        return healthy, (
            f"Galera cluster node ({kind} {info.version_text}): {size} node(s), this one "
            f"{state}, component {primary}; drains may use any node, conflicts between "
            "nodes are retried (README: Galera)"
        )

    def reconnect(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError:
            pass
        self.conn = self._connect()

    def _wrap(self, exc: BaseException, connecting: bool = False) -> MqError:
        code = error_code(exc)
        where = self.settings.describe()
        text = exc.args[1] if len(exc.args) > 1 else str(exc)
        if code == ER_ACCESS_DENIED:
            return DatabaseError(
                f"access denied at {where}: check the user and password in the config "
                "(the password is not shown)"
            )
        if code == ER_BAD_DB:
            return DatabaseError(f"database does not exist at {where}: create it first")
        if code == ER_NO_SUCH_TABLE:
            return SchemaMissing(
                f"the queue table {self.table!r} is missing at {where}: run `mq init`"
            )
        if code in RETRYABLE:
            return Deadlock(f"{where}: {text} (retries exhausted)")
        if code == ER_NET_PACKET_TOO_LARGE:
            return PayloadTooLarge(
                f"{where}: a statement exceeded the server's max_allowed_packet: {text}"
            )
        if connecting or code in CANNOT_CONNECT:
            return DatabaseError(f"cannot connect to the database at {where}: {text}")
        if code in LOST or isinstance(exc, pymysql.err.InterfaceError):
            return ConnectionLost(f"lost the connection to {where}: {text or 'connection closed'}")
        return DatabaseError(f"{where}: {text}")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except pymysql.MySQLError as exc:
            raise self._wrap(exc) from exc
        except OSError as exc:
            raise ConnectionLost(
                f"lost the connection to {self.settings.describe()}: {exc}"
            ) from exc

    def _transaction(self, body: Callable[[Any], T]) -> T:
        """Run ``body(cursor)`` in a transaction, retrying deadlocks and lock waits.

        A transaction whose COMMIT fails changed nothing (on Galera too: a
        certification failure rolls it back), so running it again is safe.
        """
        retries = self.retries
        for attempt in range(retries + 1):
            try:
                with self._errors():
                    self._begin()
                    try:
                        with self.conn.cursor() as cursor:
                            result = body(cursor)
                        self.conn.commit()
                        return result
                    except BaseException:
                        try:
                            self.conn.rollback()
                        except (pymysql.MySQLError, OSError):
                            pass
                        raise
            except Deadlock:
                if attempt == retries:
                    raise
                _backoff(attempt)
        raise AssertionError("unreachable")

    def _begin(self) -> None:
        # Not PyMySQL's begin(): its BEGIN opens a block, not a transaction, in
        # sql_mode=ORACLE; START TRANSACTION means one thing in every mode.
        with self.conn.cursor() as cursor:
            cursor.execute("START TRANSACTION")

    def close(self) -> None:
        try:
            self.conn.close()
        except (pymysql.MySQLError, OSError):
            pass

    # -- schema -----------------------------------------------------------

    def ddl(self) -> list[str]:
        return ddl(self.table)

    def schema_version(self) -> int | None:
        try:
            with self.conn.cursor() as cursor:
                cursor.execute(self._sql["schema_version"])
                row = cursor.fetchone()
        except pymysql.MySQLError as exc:
            if error_code(exc) == ER_NO_SUCH_TABLE:
                return None
            raise self._wrap(exc) from exc
        return int(row[0]) if row else None

    # -- producing --------------------------------------------------------

    def payload_fits(self, payload: bytes) -> bool:
        # At most max_allowed_packet / 2 - 1024, its escaped text (at most twice
        # as long) fits in a packet too.
        return len(payload) <= self.max_payload

    def check_sizes(self, payloads: Sequence[bytes], first_index: int = 1) -> None:
        for index, payload in enumerate(payloads, first_index):
            if not self.payload_fits(payload):
                raise PayloadTooLarge(
                    f"message {index} is {len(payload)} bytes, more than this server takes in "
                    f"one message ({too_large_hint(self.server.max_packet)}); nothing of it "
                    "was stored"
                )

    def enqueue(
        self,
        queue: str,
        payloads: Sequence[bytes],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
    ) -> list[int | None]:
        self.check_sizes(payloads)
        micros = int(delay * 1_000_000)
        if unique_key is not None:
            return self._transaction(
                lambda cursor: insert_rows(
                    cursor, self._sql, queue, payloads, micros, priority, unique_key
                )
            )
        return self._transaction(
            lambda cursor: self._insert_many(cursor, queue, payloads, micros, priority)
        )

    def _insert_many(
        self, cursor: Any, queue: str, payloads: Sequence[bytes], micros: int, priority: int
    ) -> list[int | None]:
        info = self.server
        if not info.returning and info.lock_mode == 2:
            # Interleaved auto-increment: a multi-row INSERT's ids may not be consecutive.
            return insert_rows(cursor, self._sql, queue, payloads, micros, priority, None)
        # The server refuses a statement whose values add up to more than half
        # of max_allowed_packet (measured: the connection drops), escaped or not.
        budget = min(max_payload(info.max_packet), 8 << 20)
        ids: list[int | None] = []
        chunk: list[bytes] = []
        size = 0
        for payload in payloads:
            cost = escaped_size(payload) + 80
            if chunk and (size + cost > budget or len(chunk) >= 1000):
                ids += self._insert_chunk(cursor, queue, chunk, micros, priority)
                chunk, size = [], 0
            chunk.append(payload)
            size += cost
        if chunk:
            ids += self._insert_chunk(cursor, queue, chunk, micros, priority)
        return ids

    def _insert_chunk(
        self, cursor: Any, queue: str, chunk: list[bytes], micros: int, priority: int
    ) -> list[int | None]:
        values = ",".join([self._sql["insert_row"]] * len(chunk))
        params: list[object] = []
        for payload in chunk:
            params += (queue, priority, micros, None, payload)
        if self.server.returning:
            cursor.execute(self._sql["insert_returning"].replace("{values}", values), params)
            return [row[0] for row in cursor.fetchall()]
        cursor.execute(self._sql["insert"].replace("{values}", values), params)
        first = cursor.lastrowid
        return [first + i * self.server.increment for i in range(len(chunk))]

    # -- draining ---------------------------------------------------------

    def claim(self, queue: str, limit: int, owner: str) -> list[Message]:
        skip_locked = self.server.skip_locked and not self.force_locking_claim
        select = self._sql["claim_select" if skip_locked else "claim_select_locking"]

        def body(cursor: Any) -> list[Any]:
            cursor.execute(select, (queue, limit))
            rows = cursor.fetchall()
            if rows:
                mark = self._sql["claim_mark"].replace("{ids}", placeholders(len(rows), "%s"))
                cursor.execute(mark, (owner, *[row[0] for row in rows]))
            return list(rows)

        return [
            Message(
                id=row[0],
                queue=row[1],
                status="processing",
                priority=row[2],
                error_count=row[3],
                created_at=utc(row[4]),  # type: ignore[arg-type]
                available_at=utc(row[5]),  # type: ignore[arg-type]
                unique_key=row[6],
                payload=bytes(row[7]),
                owner=owner,
            )  # fmt: skip
            for row in self._transaction(body)
        ]

    def _change(self, sql: str, params: Sequence[object]) -> int:
        """One autocommitted statement; deadlocks and lock waits are retried."""
        retries = self.retries
        for attempt in range(retries + 1):
            try:
                with self._errors(), self.conn.cursor() as cursor:
                    return int(cursor.execute(sql, params))
            except Deadlock:
                if attempt == retries:
                    raise
                _backoff(attempt)
        raise AssertionError("unreachable")

    def ack_success(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        if retention > 0 and message.unique_key is not None:
            params = (int(retention * 1e6), message.id, owner)
            return self._change(self._sql["ack_tombstone"], params) == 1
        return self._change(self._sql["ack_delete"], (message.id, owner)) == 1

    def ack_success_many(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["ack_delete_many"].replace("{ids}", placeholders(len(ids), "%s"))
        return self._change(sql, (*ids, owner))

    def ack_failure(
        self, message: Message, owner: str, error: str, retry_in: float, failed: bool
    ) -> bool:
        params = ("failed" if failed else "ready", error, int(retry_in * 1e6), message.id, owner)
        return self._change(self._sql["ack_failure"], params) == 1

    def heartbeat(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["heartbeat"].replace("{ids}", placeholders(len(ids), "%s"))
        return self._change(sql, (*ids, owner)) if ids else 0

    def release(self, ids: Sequence[int], owner: str) -> int:
        sql = self._sql["release"].replace("{ids}", placeholders(len(ids), "%s"))
        return self._change(sql, (*ids, owner)) if ids else 0

    def owned(self, ids: Sequence[int], owner: str) -> list[int]:
        if not ids:
            return []
        sql = self._sql["owned"].replace("{ids}", placeholders(len(ids), "%s"))
        with self._errors(), self.conn.cursor() as cursor:
            cursor.execute(sql, (*ids, owner))
            return [int(row[0]) for row in cursor.fetchall()]

    def release_owner(self, queue: str, owner: str) -> int:
        return self._change(self._sql["release_owner"], (queue, owner))

    def purge_tombstones(self, queue: str) -> int:
        return self._change(self._sql["purge_tombstones"], (queue,))

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        with self._errors(), self.conn.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(self._sql["explain_claim"], (queue, limit))
            return [
                " ".join(f"{k}={v}" for k, v in row.items() if v is not None)
                for row in cursor.fetchall()
            ]

    # -- reading ----------------------------------------------------------

    def stats(
        self, queue: str | None, stalled_after: Callable[[str], float]
    ) -> dict[str, QueueStats]:
        sql = self._sql["stats"].replace("{queue_filter}", "AND queue = %s" if queue else "")
        result: dict[str, QueueStats] = {}
        with self._errors(), self.conn.cursor() as cursor:
            cursor.execute(sql, (queue,) if queue else ())
            for name, ready, delayed, processing, failed, oldest in cursor.fetchall():
                stalled = 0
                if processing:
                    cursor.execute(
                        self._sql["count_stalled"], (name, int(stalled_after(name) * 1_000_000))
                    )
                    stalled = int((cursor.fetchone() or (0,))[0])
                result[name] = QueueStats(
                    ready=int(ready),
                    delayed=int(delayed),
                    processing=int(processing) - stalled,
                    stalled=stalled,
                    failed=int(failed),
                    oldest_ready_seconds=max(float(oldest), 0.0) if oldest is not None else None,
                )
        return result


def _backoff(attempt: int) -> None:
    # Jitter so that two drains that collided do not collide again; at most
    # half a second between tries (Galera's 40 tries span about 15 s).
    time.sleep(min(random.uniform(0.005, 0.05) * (attempt + 1), 0.5))


def insert_rows(
    cursor: Any,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    micros: int,
    priority: int,
    unique_key: str | None,
) -> list[int | None]:
    """One INSERT per message, inside the caller's transaction (ours or an application's)."""
    statement = sql["insert"].replace("{values}", sql["insert_row"])
    ids: list[int | None] = []
    for payload in payloads:
        if unique_key is not None:
            cursor.execute(sql["purge_expired_key"], (queue, unique_key))
        try:
            cursor.execute(statement, (queue, priority, micros, unique_key, payload))
        except pymysql.err.IntegrityError as exc:
            if error_code(exc) != ER_DUP_ENTRY:
                raise
            ids.append(None)  # the key is taken: skipped, as documented
        else:
            ids.append(cursor.lastrowid)
    return ids


def insert_in_transaction(
    conn: Any,
    table: str,
    queue: str,
    payload: bytes,
    delay: float,
    priority: int,
    unique_key: str | None,
) -> int | None:
    """One message inside an application's PyMySQL transaction (never committed here)."""
    try:
        # A plain cursor whatever cursorclass the application chose (rows as tuples).
        with conn.cursor(pymysql.cursors.Cursor) as cursor:
            if len(payload) > 1 << 20:
                # Too large a statement makes the server drop the connection, and
                # the application's transaction with it: check first.
                cursor.execute("SELECT @@max_allowed_packet")
                row = cursor.fetchone()
                packet = int(row[0]) if row else 0
                if len(payload) > max_payload(packet):
                    raise PayloadTooLarge(
                        f"payload is {len(payload)} bytes, more than this server takes in one "
                        f"message ({too_large_hint(packet)}); nothing was sent, your "
                        "transaction is untouched"
                    )
            ids = insert_rows(
                cursor, queries(table), queue, [payload], int(delay * 1e6), priority, unique_key
            )
    except pymysql.MySQLError as exc:
        if error_code(exc) == ER_NO_SUCH_TABLE:
            raise SchemaMissing(f"the queue table {table!r} is missing: run `mq init`") from None
        raise DatabaseError(f"MySQL: {exc.args[-1] if exc.args else exc}") from exc
    return ids[0]
