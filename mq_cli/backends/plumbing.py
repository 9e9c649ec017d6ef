"""The plumbing every SQL backend helper works through, declared once.

``Tx`` is a cursor inside a transaction; :class:`SqlPlumbing` is what the
statements of the operators (sqlops.py), the run log (sqlrunlog.py) and the
fleet limits (sqllimits.py) need from a backend: reads, autocommitted changes,
transactions with deadlock retries, and the dialect's times. SqlBackend
(sqlcore.py) implements it once and brings those helpers together.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from mq_cli.backends.base import Backend

T = TypeVar("T")


class Tx:
    """A DB-API cursor inside a transaction (ours, or an application's)."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any):
        self.cursor = cursor

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        self.cursor.execute(sql, params)
        return list(self.cursor.fetchall())

    def change(self, sql: str, params: Sequence[object] = ()) -> int:
        self.cursor.execute(sql, params)
        return int(self.cursor.rowcount)

    def insert(self, sql: str, params: Sequence[object]) -> int | None:
        """One INSERT: the new id (RETURNING id, else lastrowid); None when none was made."""
        self.cursor.execute(sql, params)
        if self.cursor.description:
            row = self.cursor.fetchone()
            return int(row[0]) if row else None
        return int(self.cursor.lastrowid)


class SqlPlumbing(Backend):
    """What sqlcore.SqlBackend provides to the statement helpers it is made of."""

    #: the dialect's named statements (<dialect>/<dialect>.sql) for this table
    _sql: dict[str, str]
    #: the driver's parameter placeholder
    mark: str

    @abstractmethod
    def _cursor(self) -> Any:
        """A new cursor on the connection."""

    @abstractmethod
    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """A read on its own (autocommitted)."""

    @abstractmethod
    def _change(self, sql: str, params: Sequence[object]) -> int:
        """One autocommitted statement; deadlocks and lock waits are retried."""

    @abstractmethod
    def _retried(self, run: Callable[[], T]) -> T:
        """``run()``, again after a deadlock or a lock wait."""

    @abstractmethod
    def _transaction(self, body: Callable[[Tx], T]) -> T:
        """``body(tx)`` in a transaction, retried after a deadlock."""

    @abstractmethod
    def _with_ids(self, name: str, ids: Sequence[int]) -> str:
        """The named statement with its ``{ids}`` placeholders for ``ids``."""

    @abstractmethod
    def _time(self, value: Any) -> datetime | None:
        """A time as the driver returns it, as an aware UTC datetime."""

    @abstractmethod
    def _shift(self, seconds: float) -> object:
        """The parameter for "the server's now plus ``seconds``" in this dialect's SQL."""
