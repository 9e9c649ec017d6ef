"""One success's DELETE in flight on PostgreSQL: sent through libpq, its result read later.

The drain's work on the next result (the worker's reply, the run log, the ticks)
then runs while the server commits, in one thread: a second thread would wait on
the GIL longer than the work it hides (bench/experiments/ack_thread.py, bench/experiments/ack_inflight.py).

The connection is psycopg's; psycopg knows nothing of this statement, so its result
must be read before psycopg sends anything: the backend's ``conn`` reads it first
(:meth:`AckInFlight.settle`) and keeps it for the drain, which asks for it by
message (:meth:`AckInFlight.take`).
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from mq_cli.core.errors import ConnectionLost, Deadlock, MqError

#: the name of the prepared DELETE on each server session that has it
PREPARED = b"mq_ack_delete"


class Lost:
    """The connection broke before the result was read: the DELETE may have committed."""


LOST = Lost()
Result = int | MqError | Lost


def dollar_params(sql: str) -> bytes:
    """psycopg's ``%s`` placeholders as libpq's ``$1, $2, ...``."""
    parts = sql.split("%s")
    return (
        "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)).encode() + parts[-1].encode()
    )


def _wait(fileno: int, writing: bool = False) -> None:
    # poll() lets other threads run (the drain's watchdog) while the server works, and
    # takes any descriptor number (select() stops at 1024).
    poller = select.poll()
    poller.register(fileno, select.POLLOUT if writing else select.POLLIN)
    poller.poll()


class AckInFlight:
    """At most one DELETE sent and not yet read, and the results read for the drain."""

    def __init__(self, psycopg: Any) -> None:
        self._psycopg = psycopg
        self.pending: tuple[int, str, Any] | None = None  # (message id, owner, pgconn)
        self._read: dict[tuple[int, str], Result] = {}
        self._prepared_on: Any = None  # the pgconn whose session holds PREPARED

    def send(self, conn: Any, sql: str, ident: int, owner: str) -> None:
        """Send the DELETE of ``ident`` (``sql`` with %s placeholders) on ``conn``."""
        pgconn = conn.pgconn
        statement = dollar_params(sql)
        params = [str(ident).encode(), owner.encode()]
        if conn.prepare_threshold is None:  # a pooler may sit between: nothing prepared
            pgconn.send_query_params(statement, params)
        else:
            if self._prepared_on is not pgconn:
                pgconn.send_prepare(PREPARED, statement)
                self._flush(pgconn)
                self._check(conn, self._results(pgconn))
                self._prepared_on = pgconn
            pgconn.send_query_prepared(PREPARED, params)
        self._flush(pgconn)
        self.pending = (ident, owner, pgconn)

    def settle(self, conn: Any, wrap: Callable[[BaseException], MqError]) -> None:
        """Read the pending DELETE's result (before anything else uses ``conn``)."""
        if self.pending is None:
            return
        ident, owner, pgconn = self.pending
        self.pending = None
        result: Result
        try:
            result = self._check(conn, self._results(pgconn))
        except self._psycopg.Error as exc:
            error = wrap(exc)
            result = LOST if isinstance(error, ConnectionLost) else error
        self._read[(ident, owner)] = result

    def take(
        self, conn: Any, ident: int, owner: str, wrap: Callable[[BaseException], MqError]
    ) -> Result | None:
        """The result of the DELETE of ``ident``; None if it was never read (the
        connection was replaced first: as good as lost)."""
        if self.pending is not None and self.pending[:2] == (ident, owner):
            self.settle(conn, wrap)
        return self._read.pop((ident, owner), None)

    def collected(
        self, conn: Any, ident: int, owner: str, wrap: Callable[[BaseException], MqError]
    ) -> bool | None:
        """What ``ack_success`` of ``ident`` would have returned; None where it must run
        again: never read (the connection was replaced), lost with it, or a deadlock
        (False then may mean the first one landed: the drain looks at the row)."""
        result = self.take(conn, ident, owner, wrap)
        if isinstance(result, int):
            return result == 1
        if isinstance(result, MqError) and not isinstance(result, Deadlock):
            raise result
        return None

    def forget(self) -> None:
        """The connection is being replaced: nothing pending on it will be read."""
        if self.pending is not None:
            ident, owner, _ = self.pending
            self._read[(ident, owner)] = LOST
            self.pending = None
        self._prepared_on = None

    def _flush(self, pgconn: Any) -> None:
        while pgconn.flush():
            _wait(pgconn.socket, writing=True)

    def _results(self, pgconn: Any) -> list[Any]:
        results: list[Any] = []
        while True:
            pgconn.consume_input()
            if pgconn.is_busy():
                _wait(pgconn.socket)
                continue
            result = pgconn.get_result()
            if result is None:
                return results
            results.append(result)

    def _check(self, conn: Any, results: list[Any]) -> int:
        """Rows deleted; raises the server's error as psycopg would."""
        ok = self._psycopg.pq.ExecStatus.COMMAND_OK
        for result in results:
            if result.status != ok:
                raise self._psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        return sum(result.command_tuples or 0 for result in results)
