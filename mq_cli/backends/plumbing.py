"""The narrow executor every part of an SQL backend works through, declared once.

``Tx`` is a cursor inside a transaction; :class:`Executor` is what the parts
(the schema, sqlschema.py; the meta table, meta.py; the operators'
statements, sqlops.py; the fleet limits, sqllimits.py; the run log,
sqlrunlog.py) need from a dialect: its named statements, reads, autocommitted
changes, transactions with deadlock retries, and its times. SqlBackend
(sqlcore.py) implements it once for every dialect and hands itself to each part;
a part sees this much of it and no more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from mq_cli.backends.traits import Caps

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


class Executor(Protocol):
    """What a part of an SQL backend runs its statements through (the members keep
    their underscore: they are the dialect's plumbing, not the Backend's interface)."""

    table: str
    caps: Caps
    #: the dialect's named statements (<dialect>/<dialect>.sql) for this table
    _sql: dict[str, str]
    #: the driver's parameter placeholder
    mark: str

    def _cursor(self) -> Any:
        """A new cursor on the connection."""

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """A read on its own (autocommitted)."""

    def _change(self, sql: str, params: Sequence[object]) -> int:
        """One autocommitted statement; deadlocks and lock waits are retried."""

    def _retried(self, run: Callable[[], T]) -> T:
        """``run()``, again after a deadlock or a lock wait."""

    def _transaction(self, body: Callable[[Tx], T]) -> T:
        """``body(tx)`` in a transaction, retried after a deadlock."""

    def _with_ids(self, name: str, ids: Sequence[int]) -> str:
        """The named statement with its ``{ids}`` placeholders for ``ids``."""

    def _time(self, value: Any) -> datetime | None:
        """A time as the driver returns it, as an aware UTC datetime."""

    def _shift(self, seconds: float) -> object:
        """The parameter for "the server's now plus ``seconds``" in this dialect's SQL."""
