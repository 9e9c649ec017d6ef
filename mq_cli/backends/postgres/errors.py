"""What a PostgreSQL error means for mq, from its SQLSTATE and its first line.

The errors that depend on the connection's state (a lost or a pooler-closed
connection) are told by the backend, which knows it; these depend on the
error alone.
"""

from __future__ import annotations

import re

from mq_cli.core.errors import READ_ONLY as READ_ONLY_TEXT
from mq_cli.core.errors import (
    Deadlock,
    MqError,
    PermissionDenied,
    ReadOnly,
    SchemaMissing,
)

#: deadlock, serialization failure, lock timeout: the statement changed nothing, run it again
RETRYABLE = {"40P01", "40001", "55P03"}
UNDEFINED_TABLE = "42P01"
INSUFFICIENT_PRIVILEGE = "42501"
#: read_only_sql_transaction: a write, or LISTEN, on a standby ("during recovery") or
#: under default_transaction_read_only (how some failovers demote a primary)
READ_ONLY_SQL_TRANSACTION = "25006"


def sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None)


def first_line(exc: BaseException) -> str:
    # The server's message, first line only (psycopg adds context lines).
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    return primary or (str(exc).strip().splitlines() or ["connection closed"])[0]


def by_state(state: str, text: str, where: str, table: str) -> MqError | None:
    """mq's error for a statement's SQLSTATE, or None for the backend to decide."""
    if state == INSUFFICIENT_PRIVILEGE:
        named = re.search(r"permission denied for table (\S+)", text)
        return PermissionDenied(
            f"{where}: {text} (this user lacks a privilege: README, Least privilege)",
            named.group(1) if named else None,
        )
    if state == UNDEFINED_TABLE:
        return SchemaMissing(f"the queue table {table!r} is missing at {where}: run `mq init`")
    if state in RETRYABLE:
        return Deadlock(f"{where}: {text} (retries exhausted)")
    if state == READ_ONLY_SQL_TRANSACTION:
        return ReadOnly(
            f"{READ_ONLY_TEXT}: {where}: {text}; point mq at the primary (several hosts "
            "with ?target_session_attrs=read-write follow a failover)"
        )
    return None
