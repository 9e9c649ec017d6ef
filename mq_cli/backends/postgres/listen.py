"""Waking drains on any host: LISTEN on the queue table's channel, and the
notifications an enqueue's NOTIFY sends (``PostgresBackend.listen``, ``woken``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def wake_channel(table: str) -> str:
    """The LISTEN/NOTIFY channel of a queue table (table names hold 57 characters,
    channels 63)."""
    return f"{table}_wake"


class Listener:
    """The queues a backend listens for, and the notifications not yet asked about.
    ``conn`` gives the backend's connection as it is now (a reconnect replaces it);
    ``errors`` turns the driver's errors into mq's; ``driver_error``: the driver's
    base error class."""

    def __init__(
        self,
        table: str,
        conn: Callable[[], Any],
        errors: Callable[[], AbstractContextManager[None]],
        driver_error: type[BaseException],
    ) -> None:
        self.channel = wake_channel(table)
        self._conn = conn
        self._errors = errors
        self._driver_error = driver_error
        self.queues: tuple[str, ...] = ()
        self._notified: set[str] = set()

    def listen(self, queue: str) -> int:
        conn = self._conn()
        with self._errors():
            conn.execute(f'LISTEN "{self.channel}"')
            conn.add_notify_handler(self._on_notify)
        self.queues = (*self.queues, queue)
        self._notified = set()
        return int(conn.fileno())

    def again(self) -> None:
        """On a new connection (after a reconnect): LISTEN as before."""
        queues, self.queues = self.queues, ()
        for queue in dict.fromkeys(queues):
            self.listen(queue)

    def fd(self) -> int | None:
        conn = self._conn()
        if not self.queues or conn.closed:
            return None
        return int(conn.fileno())

    def _on_notify(self, note: Any) -> None:
        # Notifications psycopg read while it ran a statement of ours.
        self._notified.add(note.payload)

    def woken(self, queue: str) -> bool:
        pgconn = self._conn().pgconn
        try:
            pgconn.consume_input()
        except self._driver_error:
            return True  # the connection went: the claim that follows finds out
        while (note := pgconn.notifies()) is not None:
            self._notified.add(note.extra.decode("utf-8", "replace"))
        if queue in self._notified:
            self._notified.discard(queue)
            return True
        return False
