"""MySQL/MariaDB backend through PyMySQL: version detection, error wrapping, retries."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mq_cli.backends import bloat, inflight
from mq_cli.backends.base import Caps, Found
from mq_cli.backends.claims import unlock_claims_for_tests
from mq_cli.backends.dialects import Dialect, LazyDriver, OpenOptions, register
from mq_cli.backends.engines import mysql_engine
from mq_cli.backends.inserts import initial_status, insert_each, insert_rows
from mq_cli.backends.liveness import lock_name
from mq_cli.backends.mysql import ahead, errors
from mq_cli.backends.mysql import url as mysql_url
from mq_cli.backends.mysql.errors import (
    ER_DUP_ENTRY,
    ER_NO_SUCH_TABLE,
    ER_UNKNOWN_SYSTEM_VARIABLE,
    error_code,
)
from mq_cli.backends.mysql.inflight import START, AckInFlight, splits_queries
from mq_cli.backends.mysql.packet import escaped_size, max_payload, too_large_hint
from mq_cli.backends.mysql.server import ServerInfo, session_options
from mq_cli.backends.sqlcore import RETRIES, SqlBackend, Tx
from mq_cli.backends.sqlfiles import queries as dialect_queries
from mq_cli.core.dburl import DatabaseSettings
from mq_cli.core.errors import (
    ConnectionLost,
    DatabaseError,
    MqError,
    PayloadTooLarge,
    SchemaMissing,
    Unreachable,
)
from mq_cli.core.states import Stored

log = logging.getLogger("mq")

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors
else:
    pymysql = LazyDriver("pymysql", "pymysql.cursors")

#: every statement of mysql/mysql.sql is written for this mode, whatever the server's
SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"
#: tries of a statement that deadlocked on a Galera node (where another node's
#: concurrent write to the same row is a 1213 at COMMIT); one server: sqlcore.RETRIES
GALERA_RETRIES = 40


def utc(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=timezone.utc) if moment is not None else None


def queries(table: str) -> dict[str, str]:
    return dialect_queries("mysql", table)


def ddl(table: str) -> list[str]:
    sql = queries(table)
    return [sql[name] for name in MysqlBackend.ddl_names]


class MysqlBackend(SqlBackend):
    kind = dialect = "mysql"
    #: a server's GET_LOCK holds a drain's liveness; the unique index is on unique_slot;
    #: DDL commits as it goes
    caps = Caps(unique_slot=True, ddl_commits=True, sends_acks=True)
    #: the run log's indexes are part of its CREATE TABLEs (MySQL has no CREATE INDEX IF NOT EXISTS)
    runlog_ddl = ("create_runs", "create_rollup")
    ddl_names = ("create_table", "create_meta", *runlog_ddl, *SqlBackend.limits_ddl)

    def __init__(self, settings: DatabaseSettings, table: str, *, create: bool = False):
        self.settings = settings
        self._promoted = {}
        #: claim with plain FOR UPDATE even where SKIP LOCKED exists (tests force the old path)
        self.force_locking_claim = False
        self.table = table
        self._sql = queries(table)
        unlock_claims_for_tests(self._sql, "claim_select", "claim_select_locking")
        self.retries = RETRIES
        self.driver_errors = (pymysql.MySQLError, OSError)
        self._acks = AckInFlight(self.driver_errors, splits_queries(pymysql.connections.Connection))
        self._ahead = ahead.ClaimInFlight(self.driver_errors, self._acks.usable)
        self._in_flight = (self._acks, self._ahead)  # read before the connection is used
        self.conn = self._connect()
        if create and self.schema_version() is None:
            self.init_schema()

    # -- the dialect: connection, errors, transactions, times -----------------

    conn = inflight.SettledConnection()  # a success's DELETE in flight is read first

    def _connect(self) -> pymysql.connections.Connection:
        s = self.settings
        options = session_options(s, SQL_MODE)
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
            raise Unreachable(f"cannot connect to the database at {s.describe()}: {exc}") from exc
        self.server = ServerInfo(
            str(row[0]), int(row[1]), int(row[2]), int(row[3]), galera=bool(int(row[4] or 0))
        )
        #: named from the banner before anything runs on it (backends/engines.py)
        kind = "MariaDB" if self.server.mariadb else "MySQL"
        self.engine = mysql_engine(str(row[0]), str(row[5] or ""), self.server.galera, kind)
        if not self.engine.accepted:
            conn.close()
            self.engine.refuse(s.describe())
        if self.server.galera:
            # Certification conflicts between nodes are normal traffic on a cluster:
            # retry them for longer than a single server's rare deadlocks.
            self.retries = GALERA_RETRIES
            log.info(
                "%s is a Galera cluster node: conflicts with other nodes are retried "
                "(up to %d times)", s.describe(), GALERA_RETRIES,
            )  # fmt: skip
        self.max_payload = max_payload(self.server.max_packet)
        return conn

    def _wrap(self, exc: BaseException, connecting: bool = False) -> MqError:
        return errors.wrap(exc, self.settings.describe(), self.table, connecting)

    def _begin(self) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute(START)

    def _commit(self) -> None:
        self.conn.commit()

    def _rollback(self) -> None:
        try:
            self.conn.rollback()
        except (pymysql.MySQLError, OSError):
            pass

    def _time(self, value: Any) -> datetime | None:
        return utc(value)

    def _shift(self, seconds: float) -> object:
        return int(seconds * 1_000_000)  # TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))

    # -- liveness -------------------------------------------------------------

    @property
    def lock_scope(self) -> str:
        # GET_LOCK names are server-wide: the database's name keeps two databases'
        # fleet slots apart. Not its address, which each host may spell its own way.
        return f"{self.settings.database}/{self.table}"

    def live_lock_take(self, owner: str) -> bool | None:
        if self.server.galera:
            # GET_LOCK is local to one node: another node would see every drain dead.
            return None
        try:
            got = self._rows(self._sql["live_take"], (lock_name(owner),))[0][0]
        except ConnectionLost:
            raise
        except DatabaseError as exc:
            log.info("no session lock on this server (%s): heartbeats alone tell live drains", exc)
            return None
        return got == 1

    def live_lock_free(self, owner: str) -> bool:
        return self._rows(self._sql["live_free"], (lock_name(owner),))[0][0] == 1

    def live_lock_seize(self, owner: str) -> bool:
        if self.server.galera:
            return False
        return self._rows(self._sql["live_take"], (lock_name(owner),))[0][0] == 1

    def live_lock_release(self, owner: str) -> None:
        self._rows(self._sql["live_release"], (lock_name(owner),))

    def reconnect(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError:
            pass
        self.conn = self._connect()

    def close(self) -> None:
        try:
            self.conn.close()
        except (pymysql.MySQLError, OSError):
            pass

    # -- MySQL's own: Galera, the unique slot, the claim without SKIP LOCKED ----

    #: the unique-key index's column, NULL without a key (see create_table)
    extra_columns = ("unique_slot",)

    def unique_index_columns(self) -> list[str]:
        params = (self.table, f"{self.table}_unique")
        return [str(row[0]) for row in self._rows(self._sql["unique_index_columns"], params)]

    def unique_key_is_text(self) -> bool:
        rows = self._rows(self._sql["unique_key_type"], (self.table,))
        return bool(rows) and str(rows[0][0]).lower() in ("varchar", "char", "text")

    def _schema_race(self, exc: BaseException) -> bool:
        # Another init (on another Galera node: no GET_LOCK there) made it first: a table,
        # a column, an index that exists now, or dropped the index this one would drop.
        return error_code(exc) in (1050, 1060, 1061, 1091)

    def server_mode(self) -> tuple[bool, str]:
        info = self.server
        kind = "MariaDB" if info.mariadb else "MySQL"
        claim = "SKIP LOCKED claims" if info.skip_locked else "locking claims (no SKIP LOCKED)"
        if not info.galera:
            return True, f"{kind} {info.version_text}, single server, {claim}"
        status = {
            str(name).lower(): str(value) for name, value in self._rows(self._sql["galera_status"])
        }
        size = status.get("wsrep_cluster_size", "?")
        state = status.get("wsrep_local_state_comment", "?")
        primary = status.get("wsrep_cluster_status", "?")
        healthy = state == "Synced" and primary == "Primary"
        return healthy, (
            f"Galera cluster node ({kind} {info.version_text}): {size} node(s), this one "
            f"{state}, component {primary}; drains may use any node, conflicts between "
            "nodes are retried (README: Galera)"
        )

    def health(self) -> list[Found]:
        rows = self._rows(self._sql["table_space"], (self.table,))
        found: list[Found] = []
        if rows:
            used, free = (int(x or 0) for x in rows[0])
            found.append(bloat.mysql_free_space(self.table, used, free, self.server.galera))
        if not self.server.mariadb:
            return found  # MySQL 8 calls the view INNODB_TABLESTATS: untested, so not read
        try:
            stats = self._rows(self._sql["table_statistics"], (self.table, self.table))
        except MqError as exc:  # a user with row access only (README's GRANTs): not a problem
            why = str(exc).split(": ", 1)[-1]  # without the URL the error starts with
            found.append((
                "statistics", True,
                f"not checked: {why} (it takes PROCESS and SELECT on mysql.innodb_table_stats)",
                False,
            ))  # fmt: skip
            return found
        if stats:
            changes, counted, since = stats[0]
            since = None if since is None else float(since)
            found.append(bloat.mysql_statistics(self.table, int(counted), int(changes), since))
        return found

    def route_checks(self) -> list[tuple[str, bool, str, bool]]:
        return [("engine", True, f"{self.engine.name}: {self.engine.detail}", False)]

    def _claim_select(self) -> str:
        skip_locked = self.server.skip_locked and not self.force_locking_claim
        return "claim_select" if skip_locked else "claim_select_locking"

    ack_success_send = inflight.ack_success_send
    ack_success_collect = inflight.ack_success_collect
    claim_ahead_send = ahead.claim_ahead_send
    claim_ahead_collect = ahead.claim_ahead_collect

    def claim_ahead_settle(self) -> None:
        self.conn  # noqa: B018 - reading conn reads what is in flight on it

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        with self._errors(), self.conn.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(self._sql["explain_claim"], (queue, limit))
            return [
                " ".join(f"{k}={v}" for k, v in row.items() if v is not None)
                for row in cursor.fetchall()
            ]

    # -- producing: sizes and multi-row INSERTs ---------------------------------

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
        info = self.server
        if unique_key is not None or (not info.returning and info.lock_mode == 2):
            # One by one: a unique key may be taken; with interleaved auto-increment a
            # multi-row INSERT's ids may not be consecutive.
            return insert_each(
                tx, self._sql, queue, payloads, when, priority, unique_key, duplicate, status
            )
        # The server refuses a statement whose values add up to more than half
        # of max_allowed_packet (measured: the connection drops), escaped or not.
        budget = min(max_payload(info.max_packet), 8 << 20)
        chunking = (1000, budget, lambda p: escaped_size(p) + 80)
        if info.returning:
            statement, ids = "insert_returning", _returned
        else:
            statement, ids = "insert", self._stepped
        return insert_rows(
            tx, self._sql, queue, payloads, when, priority, chunking, ids, statement, status
        )

    def _stepped(self, tx: Tx, statement: str, params: list[object], count: int) -> list[int]:
        first = tx.insert(statement, params)
        assert first is not None
        return [first + i * self.server.increment for i in range(count)]


def _returned(tx: Tx, statement: str, params: list[object], count: int) -> list[int]:
    return [int(row[0]) for row in tx.rows(statement, params)]


def duplicate(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.IntegrityError) and error_code(exc) == ER_DUP_ENTRY


def insert_in_transaction(
    conn: Any,
    table: str,
    queue: str,
    payload: bytes,
    delay: float,
    priority: int,
    unique_key: str | None,
    notify: bool = True,
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
            ids = insert_each(
                Tx(cursor), queries(table), queue, [payload], int(delay * 1e6), priority,
                unique_key, duplicate, initial_status(delay),
            )  # fmt: skip
    except pymysql.MySQLError as exc:
        if error_code(exc) == ER_NO_SUCH_TABLE:
            raise SchemaMissing(f"the queue table {table!r} is missing: run `mq init`") from None
        raise DatabaseError(f"MySQL: {exc.args[-1] if exc.args else exc}") from exc
    return ids[0]


def _open(settings: DatabaseSettings, table: str, options: OpenOptions) -> MysqlBackend:
    # A server: `mq init` makes the schema, with a user allowed to create tables.
    return MysqlBackend(settings, table, create=bool(options.create) and options.auto_init)


register(Dialect(
    url=mysql_url.FORM, backend=MysqlBackend, open=_open, ddl=ddl,
    insert_in_transaction=insert_in_transaction, connection_modules=("pymysql",), driver="PyMySQL",
))  # fmt: skip
