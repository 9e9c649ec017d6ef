"""group_ack's next claim sent ahead on PostgreSQL, its rows read later (issue 38).

The drain sends `claim_acking` (the group's DELETE and the next claim, one
statement) through libpq once the batch it runs should end within milliseconds
(runners/python.py: ending_soon), and reads the rows once that batch's results
are recorded: the server's work on the claim overlaps the drain's and the
child's. psycopg knows nothing of the statement, so its result is read before
anything else uses the connection (``SettledConnection``), and kept here until
the drain asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mq_cli.backends import inflight
from mq_cli.backends.postgres import claims
from mq_cli.backends.postgres.inflight import dollar_params, flush, results
from mq_cli.core.errors import ClaimUnknown, ConnectionLost, Deadlock, MqError
from mq_cli.core.models import Message

PREPARED = b"mq_claim_acking"  # its name on each server session that has it


class ClaimInFlight:
    """At most one claim sent and not yet read, and what was read of it."""

    def __init__(self, psycopg: Any) -> None:
        self._psycopg = psycopg
        self.pending: Any = None  # the connection the claim went on, until it is read
        self._read: list[Any] | MqError | inflight.Lost | None = None
        self._args: tuple[str, int, str, list[int], bool] = ("", 0, "", [], False)
        self._prepared_on: Any = None

    def send(self, conn: Any, sql: str, args: tuple[str, int, str, list[int], bool]) -> None:
        queue, limit, owner, done, _ = args
        pgconn = conn.pgconn
        ids = ("{" + ",".join(map(str, done)) + "}").encode()
        params = [ids, owner.encode(), queue.encode(), str(limit).encode(), owner.encode()]
        if conn.prepare_threshold is None:  # a pooler may sit between: nothing prepared
            pgconn.send_query_params(dollar_params(sql), params)
        else:
            if self._prepared_on is not pgconn:
                pgconn.send_prepare(PREPARED, dollar_params(sql))
                flush(pgconn)
                self._check(conn, results(pgconn), self._psycopg.pq.ExecStatus.COMMAND_OK)
                self._prepared_on = pgconn
            pgconn.send_query_prepared(PREPARED, params)
        flush(pgconn)
        self.pending, self._read, self._args = conn, None, args

    def settle(self, conn: Any, wrap: Callable[[BaseException], MqError]) -> None:
        """Read the claim's rows (before anything else uses ``conn``)."""
        if self.pending is None:
            return
        self.pending = None
        try:
            (result,) = self._check(
                conn, results(conn.pgconn), self._psycopg.pq.ExecStatus.TUPLES_OK
            )
            load = self._psycopg.adapt.Transformer(conn)
            load.set_pgresult(result)
            self._read = load.load_rows(0, result.ntuples, tuple)
        except (self._psycopg.Error, ValueError) as exc:
            error = wrap(exc)
            self._read = inflight.LOST if isinstance(error, ConnectionLost) else error

    def take(
        self, conn: Any, wrap: Callable[[BaseException], MqError]
    ) -> tuple[list[Any] | MqError | inflight.Lost | None, tuple[str, int, str, list[int], bool]]:
        """What was read of the claim (reading it now if need be), and what it was sent with."""
        self.settle(conn, wrap)
        read, self._read = self._read, None
        return read, self._args

    def forget(self) -> None:
        """The connection is being replaced: a claim pending on it is of unknown outcome."""
        if self.pending is not None:
            self.pending, self._read = None, inflight.LOST
        self._prepared_on = None

    def _check(self, conn: Any, got: Sequence[Any], ok: Any) -> Sequence[Any]:
        for result in got:
            if result.status != ok:
                raise self._psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        if len(got) != 1 and ok != self._psycopg.pq.ExecStatus.COMMAND_OK:
            raise ValueError(f"{len(got)} results for one claim")
        return got


def claim_ahead_send(backend: Any, queue: str, limit: int, owner: str, done: Sequence[int]) -> bool:
    """``Backend.claim_ahead_send``: sent, its rows read by claim_ahead_collect."""
    promoted_now = backend._promote_due(queue)
    conn = backend.conn  # reads what an earlier statement left
    args = (queue, limit, owner, list(done), promoted_now)
    with backend._errors():
        backend._ahead.send(conn, backend._sql["claim_acking"], args)
    return True


def claim_ahead_collect(backend: Any) -> tuple[int, list[Message]]:
    """``Backend.claim_ahead_collect``: what the claim sent ahead deleted and took."""
    read, (queue, limit, owner, done, promoted_now) = backend._ahead.take(
        backend._conn, backend._wrap
    )
    if isinstance(read, Deadlock):  # rolled back: nothing happened, so do it now
        return claims.claim_acking(backend, queue, limit, owner, done)
    if isinstance(read, MqError):
        raise read
    if not isinstance(read, list):  # lost with its connection: it may have committed
        raise ClaimUnknown("the connection was lost before a claim's reply came")
    return claims.acked(backend, read, queue, limit, owner, promoted_now)
