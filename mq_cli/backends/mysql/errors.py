"""MySQL/MariaDB error codes, and the mq error each becomes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mq_cli.backends.dialects import LazyDriver
from mq_cli.core.errors import READ_ONLY as READ_ONLY_TEXT
from mq_cli.core.errors import (
    ConnectionLost,
    DatabaseError,
    Deadlock,
    MqError,
    PayloadTooLarge,
    PermissionDenied,
    ReadOnly,
    SchemaMissing,
    Unreachable,
)

if TYPE_CHECKING:
    import pymysql
else:
    pymysql = LazyDriver("pymysql")

ER_ACCESS_DENIED = 1045
ER_BAD_DB = 1049
ER_NO_SUCH_TABLE = 1146
#: a table's or a column's privilege missing ("INSERT command denied ... for table `db`.`t`")
ER_TABLE_DENIED = {1142, 1143}
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_NET_PACKET_TOO_LARGE = 1153
ER_DUP_ENTRY = 1062
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
LOST = {2006, 2013, 2014, 2055, 0}  # gone away, lost during query, out of sync, lost, closed
CANNOT_CONNECT = {2002, 2003, 2005}
RETRYABLE = {ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT}
#: a server that refuses writes: --read-only / super_read_only (1290, also used for
#: other options: only with "read-only" in its text), innodb_read_only (1836), and
#: MySQL 8's ALTER SCHEMA ... READ ONLY (3989)
ER_OPTION_PREVENTS_STATEMENT = 1290
READ_ONLY_CODES = {ER_OPTION_PREVENTS_STATEMENT, 1836, 3989}


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def wrap(exc: BaseException, where: str, table: str, connecting: bool = False) -> MqError:
    """The mq error for a PyMySQL (or socket) error at ``where``."""
    if isinstance(exc, OSError):
        return ConnectionLost(f"lost the connection to {where}: {exc}")
    code = error_code(exc)
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == ER_ACCESS_DENIED:
        return DatabaseError(
            f"access denied at {where}: check the user and password in the config "
            "(the password is not shown)"
        )
    if code == ER_BAD_DB:
        return DatabaseError(f"database does not exist at {where}: create it first")
    if code == ER_NO_SUCH_TABLE:
        return SchemaMissing(f"the queue table {table!r} is missing at {where}: run `mq init`")
    if code in ER_TABLE_DENIED:
        named = re.search(r"for table [`']?(?:[^`'.]*[`']?\.[`']?)?([^`'.\s]+)", str(text))
        return PermissionDenied(
            f"{where}: {text} (this user lacks a privilege: README, Least privilege)",
            named.group(1) if named else None,
        )
    if code in RETRYABLE:
        return Deadlock(f"{where}: {text} (retries exhausted)")
    if code in READ_ONLY_CODES and (
        code != ER_OPTION_PREVENTS_STATEMENT or "read-only" in str(text).lower()
    ):
        return ReadOnly(
            f"{READ_ONLY_TEXT}: {where}: {text}; point mq at the primary (a proxy or "
            "virtual IP that follows failovers)"
        )
    if code == ER_NET_PACKET_TOO_LARGE:
        return PayloadTooLarge(
            f"{where}: a statement exceeded the server's max_allowed_packet: {text}"
        )
    if connecting or code in CANNOT_CONNECT:
        return Unreachable(f"cannot connect to the database at {where}: {text}")
    if code in LOST or isinstance(exc, pymysql.err.InterfaceError):
        return ConnectionLost(f"lost the connection to {where}: {text or 'connection closed'}")
    return DatabaseError(f"{where}: {text}")
