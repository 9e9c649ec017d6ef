"""Every error mq raises on purpose, each with the exit code the CLI gives it.

The CLI prints ``str(error)`` (one or two lines: what went wrong, what to do)
and exits with ``error.exit_code``. Messages never contain a password.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the handler's child imports this module at start
if TYPE_CHECKING:
    from typing import Any


class MqError(Exception):
    """Base class of every error mq raises on purpose."""

    exit_code = 1
    #: set when the error ends a drain: its report (drain.report.DrainReport) of what it
    #: did until then, which `mq drain --json` prints before the error
    report: Any = None
    #: set when ``MQ.enqueue_many`` stops part way (a value rejected, a batch not
    #: stored): the ids of the messages it stored before that
    stored_ids: list[int] | None = None


class InputRejected(MqError):
    """Part of the input (a payload, a line of stdin) was rejected."""

    exit_code = 1


class PayloadTooLarge(InputRejected):
    """A payload is larger than the database accepts in one statement."""


class NotFound(MqError):
    """The message asked for does not exist (any more)."""

    exit_code = 1


class ConfigError(MqError):
    """Bad configuration or usage; nothing was changed."""

    exit_code = 2


class HandlerNotFound(ConfigError):
    """A handler path could not be imported or resolved."""


class DatabaseError(MqError):
    """The database could not be reached or refused the operation."""

    exit_code = 3


class Unreachable(DatabaseError):
    """No connection could be made (refused, timed out, the server starting up or
    shutting down): nothing was done, and a later try may succeed. A wrong password or
    a missing database is a plain DatabaseError: trying again would not help."""


class SchemaMissing(DatabaseError):
    """The queue table does not exist (run `mq init`)."""


class SchemaMismatch(DatabaseError):
    """The table's schema version or shape is not what this mq works with."""


class EngineRefused(DatabaseError):
    """The server is an engine whose semantics break one of mq's guarantees (TiDB,
    CockroachDB, ...: backends/engines.py); nothing was run on it."""


class PermissionDenied(DatabaseError):
    """The database user lacks a privilege the statement needs (docs/databases/privileges.md)."""

    def __init__(self, message: str, table: str | None = None):
        super().__init__(message)
        #: the table the server named, when its message said which (else None)
        self.table = table


class Deadlock(DatabaseError):
    """A deadlock or lock-wait timeout that survived its retries."""


class ConnectionLost(DatabaseError):
    """The connection dropped mid-operation; the outcome of that operation is unknown."""


class CommitUnknown(ConnectionLost):
    """An enqueue's COMMIT went out and its answer never came back, and the database
    could not tell afterwards whether it committed: retrying might store it twice."""


class ClaimUnknown(ConnectionLost):
    """A claim's connection was lost where the claim may have taken messages (at its
    COMMIT, or during PostgreSQL's one-statement claim): if it did, they stay
    processing under the drain's owner, unknown to it, until gc or its next claim."""


#: how every read-only refusal begins, whatever the database said
READ_ONLY = "the database is read-only (a standby, or a demoted primary?)"


class ReadOnly(ConnectionLost):
    """The server refuses writes: a standby, or a primary demoted under an open socket
    (a failover). Not a failure of the statement but a role change: a drain drops the
    connection and reconnects, as after a lost one, so that a multi-host URL or a
    failover proxy leads it to the new primary."""


class SessionLost(DatabaseError):
    """A drain's database session (and the lock that showed it alive) ended while it
    held messages, and it could not show it still holds them: it stops."""
