"""group_ack's next claim sent ahead on MariaDB/MySQL (issue 38), as on PostgreSQL
(postgres/ahead.py): the claim's first statements go while the batch's last
messages run, the rest of its transaction once they are read.

A server reads a connection's statements in order, and PyMySQL sends a statement
and reads its result in two calls (mysql/inflight.py), so three go at once:
START TRANSACTION, the group's DELETE and the claim's SELECT ... FOR UPDATE SKIP
LOCKED. Once read, the claim goes on in that transaction as every claim does
(claims.select_and_mark: the guarded mark) and commits with the DELETE: one
commit for the batch's end, as before.

Until it is read, the transaction holds the rows it selected (other drains skip
them, unmarked) and the group's DELETE uncommitted: the drain reads it when the
batch's results are recorded, or at its next tick after IN_FLIGHT_READ_AFTER
(drain/running.py) when a handler outlasts the estimate that sent it. A drain
killed meanwhile rolls it all back: its group runs again, as a group whose
commit never came always does (docs/guarantees.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mq_cli.backends import inflight
from mq_cli.backends.claims import select_and_mark, topped_up
from mq_cli.backends.mysql.inflight import COM_QUERY, START
from mq_cli.backends.plumbing import Tx
from mq_cli.core.errors import ClaimUnknown, ConnectionLost, Deadlock, MqError
from mq_cli.core.models import Message

Read = tuple[int, list[Any]] | MqError | inflight.Lost | None
#: what the claim was sent with: queue, limit, owner, the group's ids, whether a
#: promotion ran just before, the claim's SELECT, and the dialect's _with_ids
Args = tuple[str, int, str, list[int], bool, str, Callable[[str, Sequence[int]], str]]


class ClaimInFlight:
    """At most one claim sent and not yet read, and what was read of it."""

    def __init__(self, driver_errors: tuple[type[BaseException], ...], usable: bool) -> None:
        self.driver_errors = driver_errors
        self.usable = usable  # False: this PyMySQL cannot send without reading
        self.pending: Any = None  # the connection the statements went on, until read
        self._read: Read = None
        self._args: Args | None = None

    def send(self, conn: Any, statements: Sequence[str], args: Args) -> None:
        for sql in statements:
            conn._execute_command(COM_QUERY, sql)
        self.pending, self._read, self._args = conn, None, args

    def settle(self, conn: Any, wrap: Callable[[BaseException], MqError]) -> None:
        """Read the claim's results and finish its transaction (before anything
        else uses ``conn``)."""
        if self.pending is None:
            return
        sent_on, self.pending = self.pending, None
        assert self._args is not None
        queue, limit, owner, done, _, select, with_ids = self._args
        try:
            if sent_on is not conn:  # replaced since (forget() marks it lost first)
                raise AssertionError("a claim sent ahead read on another connection")
            # Every result is read, even after an error: the next ones are on their way.
            results = [_result(conn, self.driver_errors) for _ in range(3 if done else 2)]
            failed = next((r for r in results if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed
            deleted = int(results[1][0]) if done else 0  # type: ignore[index]
            cursor = conn.cursor()
            try:
                rows = list(results[-1][1])  # type: ignore[index]
                rows = select_and_mark(Tx(cursor), select, with_ids, queue, limit, owner, rows)
            finally:
                cursor.close()
            conn.commit()
            self._read = (deleted, rows)
        except self.driver_errors as exc:
            try:
                conn.rollback()
            except self.driver_errors:
                pass
            error = wrap(exc)
            self._read = inflight.LOST if isinstance(error, ConnectionLost) else error

    def take(self, conn: Any, wrap: Callable[[BaseException], MqError]) -> tuple[Read, Args]:
        """What was read of the claim (reading it now if need be), and what it was sent with."""
        self.settle(conn, wrap)
        read, self._read = self._read, None
        assert self._args is not None
        return read, self._args

    def forget(self) -> None:
        """The connection is being replaced: a claim pending on it is of unknown outcome
        (its transaction rolled back unless its COMMIT went)."""
        if self.pending is not None:
            self.pending, self._read = None, inflight.LOST


def _result(
    conn: Any, errors: tuple[type[BaseException], ...]
) -> tuple[int, tuple] | BaseException:
    """The next result on ``conn``: (rows changed, rows read), or the error it was."""
    if conn._sock is None:  # lost with an earlier result: PyMySQL closed it
        return ConnectionError("the connection closed before the claim's results came")
    conn._next_seq_id = 1  # each statement's reply starts its own sequence
    try:
        changed = conn._read_query_result()
    except errors as exc:
        return exc
    return int(changed), tuple(conn._result.rows or ())


def claim_ahead_send(backend: Any, queue: str, limit: int, owner: str, done: Sequence[int]) -> bool:
    """``Backend.claim_ahead_send``: sent, its rows read by claim_ahead_collect; False
    where the server has no SKIP LOCKED, whose claims wait for each other's locks:
    a transaction held open while a batch ends would hold up every other drain."""
    if not backend._ahead.usable or backend._claim_select() != "claim_select":
        return False
    promoted_now = backend._promote_due(queue)
    conn = backend.conn  # reads what an earlier statement left
    select = backend._sql[backend._claim_select()]
    with backend._errors():
        literal = conn.escape
        statements = [START]
        if done:
            delete = backend._with_ids("ack_delete_many", done)
            statements.append(delete % tuple(map(literal, (*done, owner))))
        statements.append(select % (literal(queue), literal(limit)))
        args = (queue, limit, owner, list(done), promoted_now, select, backend._with_ids)
        backend._ahead.send(conn, statements, args)
    return True


def claim_ahead_collect(backend: Any) -> tuple[int, list[Message]]:
    """``Backend.claim_ahead_collect``: what the claim sent ahead deleted and took."""
    read, (queue, limit, owner, done, promoted_now, _, _) = backend._ahead.take(
        backend._conn, backend._wrap
    )
    if isinstance(read, Deadlock):  # rolled back: nothing happened, so do it now
        return backend.claim_acking(queue, limit, owner, done)
    if isinstance(read, MqError):
        raise read
    if not isinstance(read, tuple):  # lost with its connection: it may have committed
        raise ClaimUnknown("the connection was lost before a claim's reply came")
    deleted, rows = read
    rows = topped_up(backend, rows, queue, limit, owner, promoted_now)
    return deleted, backend._messages_of(rows, owner)
