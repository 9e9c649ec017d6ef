"""A success's DELETE in flight on PostgreSQL, through libpq (backends/inflight.py):
prepared once per server session, unprepared where a pooler may sit in between."""

from __future__ import annotations

import functools
import select
from typing import Any

from mq_cli.backends import inflight

#: the name of the prepared DELETE on each server session that has it
PREPARED = b"mq_ack_delete"


@functools.lru_cache(maxsize=16)  # the same few statements, once per message each
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


class AckInFlight(inflight.AckInFlight):
    def __init__(self, psycopg: Any) -> None:
        super().__init__()
        self._psycopg = psycopg
        self.driver_errors = (psycopg.Error,)
        self._prepared_on: Any = None  # the pgconn whose session holds PREPARED

    def _send(self, conn: Any, sql: str, ident: int, owner: str) -> Any:
        pgconn = conn.pgconn
        statement = dollar_params(sql)
        params = [str(ident).encode(), owner.encode()]
        if conn.prepare_threshold is None:  # a pooler may sit between: nothing prepared
            pgconn.send_query_params(statement, params)
        else:
            if self._prepared_on is not pgconn:
                pgconn.send_prepare(PREPARED, statement)
                flush(pgconn)
                self._check(conn, results(pgconn))
                self._prepared_on = pgconn
            pgconn.send_query_prepared(PREPARED, params)
        flush(pgconn)
        return pgconn

    def _receive(self, conn: Any, sent_on: Any) -> int:
        return self._check(conn, results(sent_on))

    def forget(self) -> None:
        super().forget()
        self._prepared_on = None

    def _check(self, conn: Any, results: list[Any]) -> int:
        """Rows deleted; raises the server's error as psycopg would."""
        ok = self._psycopg.pq.ExecStatus.COMMAND_OK
        for result in results:
            if result.status != ok:
                raise self._psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        return sum(result.command_tuples or 0 for result in results)


def flush(pgconn: Any) -> None:
    """Send what libpq holds for the server."""
    while pgconn.flush():
        _wait(pgconn.socket, writing=True)


def results(pgconn: Any) -> list[Any]:
    """Every result of what was sent, waiting for them."""
    got: list[Any] = []
    while True:
        pgconn.consume_input()
        if pgconn.is_busy():
            _wait(pgconn.socket)
            continue
        result = pgconn.get_result()
        if result is None:
            return got
        got.append(result)
