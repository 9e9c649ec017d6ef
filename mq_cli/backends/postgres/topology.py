"""What sits between mq and a PostgreSQL server: a pooler, a standby.

**Poolers.** A pooler in transaction mode (PgBouncer's ``pool_mode =
transaction``, and pgcat, Supavisor, RDS Proxy alike) gives each transaction
whatever server session is free, so nothing that lives in a session survives
between two transactions: server-side prepared statements (psycopg prepares a
statement once it has run ``prepare_threshold`` times, and the next transaction
finds it missing or already there), session advisory locks (the drain's
liveness lock), ``LISTEN``. In session mode a client keeps its server session
until it disconnects, so everything works as direct.

mq prepares statements on the server (psycopg's default) only where no pooler
sits in between: ``pooler: none``, or ``auto`` when none was detected. A drain
alone pays about half its speed for planning every statement again (see the
README), so ``auto`` does not give that up on a direct connection. The mode
decides the rest: through a transaction pooler a drain takes no session lock
(heartbeats alone tell a live drain; `stalled_after` is the fallback) and a
waiting drain polls instead of listening.

Detection, where certain: PostgreSQL sends each client its backend's pid at
connect (BackendKeyData), which ``pg_backend_pid()`` repeats on a direct
connection. A pooler answers the startup itself, with a key of its own, so the
two differ: a pooler is certain. Its mode is not visible to a client, so
``auto`` treats a detected pooler as transaction mode (the safe side) until
``pooler: session`` says otherwise. A pooler that passes the server's key on is
not detected: set ``pooler:``.
"""

from __future__ import annotations

import logging
from typing import Any

from mq_cli.backends.engines import Engine, postgres_engine
from mq_cli.core.dburl import DatabaseSettings

log = logging.getLogger("mq")

#: libpq's message when target_session_attrs refused every host, and the one that
#: reaches a standby by mistake: both say this first
READ_ONLY = "the database is read-only (a standby?)"


#: what PgBouncer in statement mode answers to a BEGIN (then it closes the connection)
STATEMENT_POOL_SAYS = "transaction blocks not allowed in statement pooling mode"


def statement_pool_text(settings: DatabaseSettings) -> str:
    """The error for a pool in statement mode: every mq write is a transaction."""
    return (
        f"PgBouncer in statement mode at {settings.describe()} cannot run mq's transactions; "
        "use pool_mode = transaction or session for this database (pgbouncer.ini)"
    )


def prepare_threshold(settings: DatabaseSettings) -> int | None:
    """psycopg's prepare_threshold at connect: None (never prepare on the server)
    where the config names a pooler; for ``auto``, :func:`probe_session` decides
    before any statement has run often enough to be prepared."""
    return 5 if settings.pooler in ("none", "auto") else None


def probe_session(conn: Any) -> tuple[bool, bool]:
    """(a pooler answered the startup, the server is in recovery), in one round trip."""
    statement = "SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_is_in_recovery()"
    pid, recovering = conn.execute(statement).fetchone()
    return int(pid) != int(conn.info.backend_pid), bool(recovering)


def probe_engine(conn: Any, sql: dict[str, str], table: str) -> Engine:
    """What answers behind the URL, named from its banner and catalog (see engines.py)."""
    version, number, citus = conn.execute(sql["engine"]).fetchone()
    distributed = False
    if citus:
        row = conn.execute(sql["citus_distributed"], (f'"{table}"',)).fetchone()
        distributed = bool(row[0])
    return postgres_engine(str(version), int(number), bool(citus), distributed)


def pool_mode(settings: DatabaseSettings, detected: bool) -> str:
    """``none``, ``transaction`` or ``session``: how mq behaves on this connection."""
    if settings.pooler != "auto":
        return settings.pooler
    return "transaction" if detected else "none"


def read_only_text(settings: DatabaseSettings) -> str:
    hint = (
        "wait for the promotion, or check target_session_attrs=read-write"
        if settings.hosts
        else "point mq at the primary, or list every host with ?target_session_attrs=read-write"
    )
    return f"{READ_ONLY} at {settings.describe()}: {hint}"


class Said:
    """Each degradation logged once per process (a drain reconnects, and opens
    connections for gc and the run log: one line at -v is enough)."""

    said: set[str] = set()

    @classmethod
    def once(cls, text: str) -> None:
        if text not in cls.said:
            cls.said.add(text)
            log.info("%s", text)


NO_LOCK = (
    "through a pooler in transaction mode: no session lock, heartbeats alone tell a live "
    "drain (a killed drain's messages go stalled after stalled_after)"
)
NO_LISTEN = (
    "through a pooler in transaction mode: no LISTEN, a waiting drain polls (at least "
    "once a second) for other hosts' enqueues"
)


def search_path_check(schemas: list[str]) -> tuple[str, bool, str, bool]:
    """`mq check`'s line on the search path (``current_schemas(true)``): mq's statements
    name pg_catalog for every function and type, but their operators (``=``, ``<``,
    ``+``, ...) are found on the path, and are pg_catalog's only while it comes first
    (postgres/postgres.sql says why). pg_temp is never searched for operators."""
    path = [schema for schema in schemas if not schema.startswith("pg_temp")]
    before = path[: path.index("pg_catalog")] if "pg_catalog" in path else path
    if not before:
        return ("search_path", True, "pg_catalog first: mq's operators are built-in", False)
    return (
        "search_path", True,
        f"{', '.join(before)} before pg_catalog: an operator there that takes the same types "
        "as a built-in one would run in mq's statements instead (with mq's rights over every "
        "payload); set search_path with pg_catalog first, or without it (it is then searched "
        "first)",
        True,
    )  # fmt: skip


def checks(
    settings: DatabaseSettings, mode: str, detected: bool
) -> list[tuple[str, bool, str, bool]]:
    """`mq check`'s lines about a pooler: (name, ok, detail, warn)."""
    seen = "a pooler answered (its session key is not the server's)"
    if mode == "none":
        if settings.pooler == "none":
            return [
                ("pooler", True, "none (pooler: none): statements prepared on the server", False)
            ]
        return [(
            "pooler", True,
            "none detected (pooler: auto): statements prepared on the server; behind a pooler "
            "that passes the server's session key on, set pooler: transaction or session",
            False,
        )]  # fmt: skip
    if mode == "session":
        return [(
            "pooler", True,
            f"session mode (pooler: session{'; ' + seen if detected else ''}): every feature "
            "works as direct, no statement is prepared on the server",
            False,
        )]  # fmt: skip
    why = "pooler: transaction"
    if settings.pooler == "auto":
        why = f"assumed: {seen}; set pooler: session if it pools sessions"
    return [
        ("pooler", True, f"transaction mode ({why})", True),
        (
            "pooler degrades", True,
            "a killed drain's messages stay processing until stalled_after (no session lock); "
            "waiting drains poll instead of LISTEN: use a short stalled_after (e.g. 1m), or "
            "point drains at a session-mode pool",
            True,
        ),
    ]  # fmt: skip
