"""One success's DELETE in flight on a server connection: sent, its result read later.

The drain's work on the next result (the worker's reply, the run log, the ticks)
then runs while the server commits, in one thread: a second thread would wait on
the GIL longer than the work it hides (bench/experiments/ack_thread.py,
bench/experiments/ack_inflight.py).

The driver knows nothing of this statement, so its result must be read before
the driver sends anything else: the backend's ``conn`` reads it first
(:meth:`AckInFlight.settle`) and keeps it for the drain, which asks for it by
message (:meth:`AckInFlight.take`). How a statement is sent and its result read
is the dialect's (``postgres/inflight.py``, ``mysql/inflight.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mq_cli.core.errors import ConnectionLost, Deadlock, MqError
from mq_cli.core.models import Message


class Lost:
    """The connection broke before the result was read: the DELETE may have committed."""


LOST = Lost()
Result = int | MqError | Lost


class AckInFlight:
    """At most one DELETE sent and not yet read, and the results read for the drain."""

    #: what the driver raises when the result cannot be read
    driver_errors: tuple[type[BaseException], ...] = ()
    #: False: the driver cannot send without reading, so nothing is sent ahead
    usable = True

    def __init__(self) -> None:
        self.pending: tuple[int, str, Any] | None = None  # (message id, owner, what was sent on)
        self._read: dict[tuple[int, str], Result] = {}

    def send(self, conn: Any, sql: str, ident: int, owner: str) -> None:
        """Send the DELETE of ``ident`` (``sql`` with %s placeholders) on ``conn``."""
        self.pending = (ident, owner, self._send(conn, sql, ident, owner))

    def settle(self, conn: Any, wrap: Callable[[BaseException], MqError]) -> None:
        """Read the pending DELETE's result (before anything else uses ``conn``)."""
        if self.pending is None:
            return
        ident, owner, sent_on = self.pending
        self.pending = None
        result: Result
        try:
            result = self._receive(conn, sent_on)
        except self.driver_errors as exc:
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

    def _send(self, conn: Any, sql: str, ident: int, owner: str) -> Any:
        """Send the statement; what :meth:`_receive` needs to read its result."""
        raise NotImplementedError

    def _receive(self, conn: Any, sent_on: Any) -> int:
        """The rows the statement sent on ``sent_on`` deleted; the driver's error if it failed."""
        raise NotImplementedError


class SettledConnection:
    """A backend's ``conn`` while statements may be in flight on it: each of
    ``backend._in_flight`` (a success's DELETE; PostgreSQL's claim sent ahead,
    postgres/ahead.py) has its result read before anything else uses the
    connection, and a connection replaced (a reconnect) marks what was pending on
    the old one lost."""

    def __get__(self, backend: Any, owner: type | None = None) -> Any:
        if backend is None:
            return self
        for sent in backend._in_flight:
            if sent.pending is not None:
                sent.settle(backend._conn, backend._wrap)
        return backend._conn

    def __set__(self, backend: Any, value: Any) -> None:
        if getattr(backend, "_conn", None) is not None:
            for sent in backend._in_flight:
                sent.forget()
        backend._conn = value


def ack_success_send(backend: Any, message: Message, owner: str, retention: float = 0.0) -> bool:
    """``Backend.ack_success_send`` for a dialect whose ``_acks`` is an AckInFlight."""
    if (retention > 0 and message.unique_key is not None) or not backend._acks.usable:
        return False  # a tombstone (its own UPDATE), or a driver that cannot: in series
    conn = backend.conn  # reads what an earlier one left
    with backend._errors():
        backend._acks.send(conn, backend._sql["ack_delete"], message.id, owner)
    return True


def ack_success_collect(backend: Any, message: Message, owner: str, retention: float = 0.0) -> bool:
    """``Backend.ack_success_collect`` for a dialect whose ``_acks`` is an AckInFlight."""
    done = backend._acks.collected(backend._conn, message.id, owner, backend._wrap)
    return bool(backend.ack_success(message, owner, retention)) if done is None else done
