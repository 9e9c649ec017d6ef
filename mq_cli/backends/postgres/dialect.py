"""PostgreSQL dialect through psycopg 3: connection, error mapping, one-statement claims."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mq_cli.backends import commits, inflight
from mq_cli.backends.base import Caps, Found
from mq_cli.backends.claims import unlock_claims_for_tests
from mq_cli.backends.dialects import Dialect, LazyDriver, OpenOptions, driver_installed, register
from mq_cli.backends.inserts import initial_status
from mq_cli.backends.liveness import lock_key
from mq_cli.backends.postgres import ahead, claims, session, topology
from mq_cli.backends.postgres import errors as pg_errors
from mq_cli.backends.postgres import schema as pg_schema
from mq_cli.backends.postgres import url as pg_url
from mq_cli.backends.postgres.horizon import dead_rows, facts, horizon
from mq_cli.backends.postgres.inflight import AckInFlight
from mq_cli.backends.postgres.inserts import insert_messages
from mq_cli.backends.postgres.listen import Listener, wake_channel
from mq_cli.backends.sqlcore import SqlBackend, Tx
from mq_cli.backends.sqlfiles import queries as dialect_queries
from mq_cli.core.dburl import DatabaseSettings
from mq_cli.core.errors import (
    ConfigError,
    ConnectionLost,
    DatabaseError,
    MqError,
    SchemaMissing,
    Unreachable,
)
from mq_cli.core.models import Message
from mq_cli.core.states import Stored

log = logging.getLogger("mq")

if TYPE_CHECKING:
    import psycopg
    import psycopg.rows
else:
    psycopg = LazyDriver("psycopg", "psycopg.rows")

#: identifiers are at most 63 bytes: room for the longest name mq derives, `<table>_unique`
MAX_TABLE = 63 - len("_unique")
#: `mq check` fails when a transaction (or a prepared one) has been open this long (seconds)
#: (the table-growth lines' thresholds are in backends/bloat.py)
LONG_TRANSACTION = 300.0


def queries(table: str) -> dict[str, str]:
    if len(table) > MAX_TABLE:
        # PostgreSQL would cut `<table>_unique` short (a NOTICE only), and no check
        # would ever find the index again.
        raise ConfigError(
            f"table name {table!r} is {len(table)} characters: on PostgreSQL it may have "
            f"at most {MAX_TABLE} characters (its identifiers are at most 63 bytes)"
        )
    return dialect_queries("postgres", table, storage=pg_schema.storage())


def ddl(table: str) -> list[str]:
    sql = queries(table)
    return [sql[name] for name in PostgresBackend.ddl_names]


def require_driver() -> None:
    if not driver_installed(psycopg):
        raise ConfigError(pg_url.MISSING)


class PostgresBackend(SqlBackend):
    kind = dialect = "postgres"
    caps = Caps(sends_acks=True)
    ddl_names = (
        "create_table", "create_claim_index", "create_unique_index", "create_due_index",
        "create_meta", *SqlBackend.runlog_ddl, *SqlBackend.limits_ddl,
    )  # fmt: skip
    #: bytea holds up to 1 GB; payloads travel as binary parameters (no escaping)
    max_payload = 1_000_000_000 - 1024

    def _storable(self, value: str) -> str:
        # PostgreSQL's text cannot hold NUL: a handler's error that printed one
        # would make its own failure unrecordable. Stored as the escape mq shows.
        return value.replace("\x00", "\\x00")

    def __init__(
        self,
        settings: DatabaseSettings,
        table: str,
        *,
        create: bool = False,
        standby_ok: bool = False,
    ):
        require_driver()
        self.settings = settings
        self._promoted = {}
        self.standby_ok = standby_ok  # `mq check` looks at a standby; nothing else may
        self.table = table
        self._sql = queries(table)
        unlock_claims_for_tests(self._sql, "claim", "claim_acking")
        self.driver_errors = (psycopg.Error,)
        self._statement_pool = False  # a pool in statement mode refused a BEGIN here
        self._acks = AckInFlight(psycopg)
        self._ahead = ahead.ClaimInFlight(psycopg)
        self._in_flight = (self._acks, self._ahead)  # read before the connection is used
        self._listener = Listener(table, lambda: self.conn, self._errors, psycopg.Error)
        self.conn = self._connect()
        if create and self.schema_version() is None:
            self.init_schema()

    # -- the dialect: connection, errors, transactions, times -------------------

    conn = inflight.SettledConnection()  # a success's DELETE in flight is read first

    def _connect(self) -> Any:
        s = self.settings
        options = session.connect_options(s)
        try:
            conn = psycopg.connect(**options)
        except psycopg.Error as exc:
            raise self._wrap(exc, connecting=True) from None
        try:  # named before anything else runs on it (backends/engines.py)
            self.engine = topology.probe_engine(conn, self._sql, self.table)
            if self.engine.accepted:
                self.pooler_seen, self.in_recovery = topology.probe_session(conn)
        except psycopg.Error as exc:
            conn.close()
            raise self._wrap(exc, connecting=True) from None
        if not self.engine.accepted:
            conn.close()
            self.engine.refuse(s.describe())
        self.version = conn.info.server_version
        self.pool_mode = topology.pool_mode(s, self.pooler_seen)
        if self.pooler_seen:
            conn.prepare_threshold = None  # the probe ran once: nothing is prepared yet
        if self.in_recovery and not self.standby_ok:
            conn.close()
            raise DatabaseError(topology.read_only_text(s))
        return conn

    def _wrap(self, exc: BaseException, connecting: bool = False) -> MqError:
        where = self.settings.describe()
        state = pg_errors.sqlstate(exc) or ""
        text = pg_errors.first_line(exc)
        if state in ("28P01", "28000"):
            return DatabaseError(
                f"access denied at {where}: {text} (check the user, the password and "
                "pg_hba.conf; the password is not shown)"
            )
        if state == "3D000":
            return DatabaseError(f"database does not exist at {where}: create it first")
        if connecting:
            return Unreachable(f"cannot connect to the database at {where}: {text}")
        if topology.STATEMENT_POOL_SAYS in text or (self._statement_pool and self.conn.closed):
            # Not a lost connection to reconnect: the pooler closed it on purpose and
            # will close the next one alike; what it closed says it again.
            self._statement_pool = True
            return DatabaseError(topology.statement_pool_text(self.settings))
        known = pg_errors.by_state(state, text, where, self.table)
        if known is not None:
            return known
        if (
            isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
            and (self.conn.closed or state.startswith("08") or state.startswith("57P"))
        ) or state.startswith("08"):
            return ConnectionLost(f"lost the connection to {where}: {text}")
        return DatabaseError(f"{where}: {text}")

    def _begin(self) -> None:
        self.conn.execute("BEGIN")

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        try:
            if not self.conn.closed:
                self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _cursor(self) -> Any:
        return self.conn.cursor()

    def _time(self, value: Any) -> datetime | None:
        return value.astimezone(timezone.utc) if value is not None else None

    def _shift(self, seconds: float) -> object:
        return float(seconds)  # now() + make_interval(secs => %s)

    # -- liveness -------------------------------------------------------------

    @staticmethod
    def _halves(owner: str) -> tuple[int, int]:
        """pg_locks shows a bigint advisory key as classid (high half) and objid (low)."""
        key = lock_key(owner) & 0xFFFFFFFFFFFFFFFF
        return key >> 32, key & 0xFFFFFFFF

    def live_lock_take(self, owner: str) -> bool | None:
        if self.pool_mode == "transaction":
            topology.Said.once(topology.NO_LOCK)
            return None
        try:
            if not self._rows(self._sql["live_take"], (lock_key(owner),))[0][0]:
                return False
            if not self._rows(self._sql["live_mine"], self._halves(owner))[0][0]:
                # A pooler in transaction mode ran that on another server session,
                # which may end while this drain lives: no lock to trust.
                log.info("the session lock is not on this session (a pooler?): heartbeats alone")
                return None
        except ConnectionLost:
            raise
        except DatabaseError as exc:
            log.info("no session lock on this server (%s): heartbeats alone tell live drains", exc)
            return None
        return True

    def live_lock_free(self, owner: str) -> bool:
        if self.pool_mode == "transaction":
            # Seizing a dead drain's lock to mark it would take it on one server
            # session and give it back on another: judge by heartbeats alone here.
            return False
        return bool(self._rows(self._sql["live_free"], self._halves(owner))[0][0])

    def live_lock_seize(self, owner: str) -> bool:
        return bool(self._rows(self._sql["live_take"], (lock_key(owner),))[0][0])

    def live_lock_release(self, owner: str) -> None:
        self._rows(self._sql["live_release"], (lock_key(owner),))

    def _commit_proof(self, tx: Tx) -> object:
        return tx.rows(self._sql["txid_current"])[0][0]

    def _committed(self, proof: object, ids: list[int | None]) -> bool | None:
        self.reconnect()  # the server's commit log tells: commits.txid_committed
        return commits.txid_committed(lambda: self._rows(self._sql["txid_status"], (proof,))[0][0])

    def reconnect(self) -> None:
        self.close()
        self.conn = self._connect()
        self._listener.again()

    def close(self) -> None:
        try:
            self.conn.close()
        except psycopg.Error:
            pass

    def server_mode(self) -> tuple[bool, str]:
        major, minor = divmod(self.version, 10000)
        if self.in_recovery:
            return (
                False,
                f"PostgreSQL {major}.{minor} in recovery: {topology.read_only_text(self.settings)}",
            )
        return True, f"PostgreSQL {major}.{minor}, SKIP LOCKED claims in one statement"

    def route_checks(self) -> list[tuple[str, bool, str, bool]]:
        engine = ("engine", True, f"{self.engine.name}: {self.engine.detail}", False)
        path = topology.search_path_check(self._rows(self._sql["search_path"])[0][0])
        return [engine, path, *topology.checks(self.settings, self.pool_mode, self.pooler_seen)]

    # -- schema: the storage parameters of a delete-heavy table (schema.py) ---------

    def _migrate(self) -> list[str]:
        done = super()._migrate()
        return done + pg_schema.set_storage(self, done)

    def _schema_race(self, exc: BaseException) -> bool:
        return pg_schema.race(exc)

    def vacuum_horizon(self) -> dict[str, Any]:
        return facts(lambda name: self._rows(self._sql[name]))

    def health(self) -> list[Found]:
        found: list[Found] = list(
            horizon(lambda name: self._rows(self._sql[name]), LONG_TRANSACTION)
        )
        rows = self._rows(self._sql["dead_rows"], (f'"{self.table}"',))
        return found + dead_rows(self.table, rows)

    # -- claims, acknowledgements and inserts (claims.py, inflight.py, inserts.py) ----

    def _claim(self, queue: str, limit: int, owner: str) -> list[Any]:
        return claims.claim_alone(self, self.conn, queue, limit, owner)

    def _claim_rows(self, tx: Tx, queue: str, limit: int, owner: str) -> list[Any]:
        # Inside a transaction of the caller's (rate_limit: the tokens and the claim).
        return claims.claim_with(tx.rows, self._sql["claim"], queue, limit, owner)

    def claim_acking(
        self, queue: str, limit: int, owner: str, done: Sequence[int]
    ) -> tuple[int, list[Message]]:
        return claims.claim_acking(self, queue, limit, owner, done)

    claim_ahead_send = ahead.claim_ahead_send
    claim_ahead_collect = ahead.claim_ahead_collect
    ack_success_send = inflight.ack_success_send
    ack_success_collect = inflight.ack_success_collect

    def explain_claim(self, queue: str, limit: int) -> list[str]:
        # The real statement (EXPLAIN alone runs nothing): the CTE's plan is the claim's.
        statement = "EXPLAIN " + self._sql["claim"]
        return [str(row[0]) for row in self._rows(statement, (queue, limit, "explain"))]

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

    # -- waking drains on any host (LISTEN/NOTIFY) -----------------------------

    def _wake(self, tx: Tx, queue: str) -> None:
        tx.rows(self._sql["notify"], (wake_channel(self.table), queue))

    def listen(self, queue: str) -> int | None:
        if self.pool_mode == "transaction":
            topology.Said.once(topology.NO_LISTEN)
            return None
        return self._listener.listen(queue)

    def listen_fd(self) -> int | None:
        return self._listener.fd()

    def woken(self, queue: str) -> bool:
        return self._listener.woken(queue)


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
    """One message inside an application's psycopg transaction (never committed here).

    Its times are the transaction's (now() is when it began). ``notify``: wake
    waiting drains on any host when the application commits."""
    require_driver()
    try:
        # Rows as tuples whatever row_factory the application chose.
        with conn.cursor(row_factory=psycopg.rows.tuple_row) as cursor:
            sql = queries(table)
            ids = insert_messages(
                Tx(cursor), sql, queue, [payload], float(delay), priority, unique_key,
                initial_status(delay),
            )  # fmt: skip
            if notify and not delay and ids[0] is not None:
                # Delivered when the application commits, not before.
                Tx(cursor).rows(sql["notify"], (wake_channel(table), queue))
    except psycopg.Error as exc:
        if pg_errors.sqlstate(exc) == pg_errors.UNDEFINED_TABLE:
            raise SchemaMissing(f"the queue table {table!r} is missing: run `mq init`") from None
        raise DatabaseError(f"PostgreSQL: {pg_errors.first_line(exc)}") from exc
    return ids[0]


def _open(settings: DatabaseSettings, table: str, options: OpenOptions) -> PostgresBackend:
    # A server: `mq init` makes the schema, with a user allowed to create tables.
    create = bool(options.create) and options.auto_init
    return PostgresBackend(settings, table, create=create, standby_ok=options.standby_ok)


register(Dialect(
    url=pg_url.FORM, backend=PostgresBackend, open=_open, ddl=ddl,
    insert_in_transaction=insert_in_transaction, connection_modules=("psycopg",), driver="psycopg",
))  # fmt: skip
