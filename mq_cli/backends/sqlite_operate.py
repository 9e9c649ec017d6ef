"""The operators' statements of the SQLite backend: gc, list, show, retry, delete, purge.

A mixin of :class:`~mq_cli.backends.sqlite.SqliteBackend`, which brings the
connection, the error wrapping and write transactions; sqlite.py keeps
producing and draining. The SQL is in sql/sqlite.sql with the rest.
"""

from __future__ import annotations

import sqlite3
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING

from ..models import ByIdResult, Message
from .base import Backend, placeholders

if TYPE_CHECKING:
    from .schema import Shape


# sqlite.py imports this module, so its helpers are imported when first used.
def offset(seconds: float) -> str:
    from .sqlite import offset

    return offset(seconds)


def parse_time(text: str | None) -> datetime | None:
    from .sqlite import parse_time

    return parse_time(text)


class _RolledBack(Exception):
    """Ends the probe's transaction the way a failure would: with a ROLLBACK."""


class SqliteOperate(Backend):
    """Operator methods; SqliteBackend provides the plumbing they use."""

    _sql: dict[str, str]
    conn: sqlite3.Connection

    if TYPE_CHECKING:

        @abstractmethod
        def _errors(self) -> AbstractContextManager[None]: ...

        @abstractmethod
        def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...

        @abstractmethod
        def _change(self, sql: str, params: Sequence[object]) -> int: ...

    def _rows(self, sql: str, params: Sequence[object]) -> list[tuple]:
        with self._errors():
            return self.conn.execute(sql, params).fetchall()

    def _messages(self, name: str, params: Sequence[object]) -> list[Message]:
        return [_listed(row) for row in self._rows(self._sql[name], params)]

    # -- schema (backends/schema.py decides; these only ask and run) --------

    def table_shape(self) -> Shape | None:
        from .schema import Shape

        columns = frozenset(row[0] for row in self._rows(self._sql["table_columns"], (self.table,)))
        if not columns:
            return None
        indexes = self._rows(self._sql["table_indexes"], (self.table,))
        return Shape(columns, {name: bool(unique) for name, unique in indexes})

    def run_schema(self, name: str, params: Sequence[object] = ()) -> None:
        with self._errors():
            self.conn.execute(self._sql[name], params)

    def run_schema_statement(self, statement: str) -> None:
        with self._errors():
            self.conn.execute(statement)

    def probe_write(self) -> None:
        # _write() rolls back on an exception: raise one once the insert worked.
        try:
            with self._write() as conn:
                conn.execute(self._sql["probe_write"])
                raise _RolledBack
        except _RolledBack:
            pass

    def integrity(self) -> list[str]:
        # quick_check reads every page (not the index contents): O(size), so only in `mq check`.
        rows = self._rows(self._sql["quick_check"], ())
        found = [line for row in rows for line in str(row[0]).splitlines()]
        return [] if found == ["ok"] else [x for x in found if not x.startswith("***")]

    def clock_read(
        self, host_key: str
    ) -> tuple[datetime, datetime | None, str | None, str | None, str | None]:
        now, newest, seen, step, host = self._rows(self._sql["clock_read"], (host_key,))[0]
        return parse_time(now), parse_time(newest), seen, step, host  # type: ignore[return-value]

    def clock_step_read(self) -> tuple[datetime, str | None]:
        now, step = self._rows(self._sql["clock_step"], ())[0]
        return parse_time(now), step  # type: ignore[return-value]

    def meta_put(self, values: dict[str, str]) -> None:
        with self._write() as conn:
            conn.executemany(self._sql["meta_put"], list(values.items()))

    def clock_repair_back(self) -> int:
        with self._write() as conn:
            return conn.execute(self._sql["clock_repair_back"]).rowcount

    def _with_ids(self, name: str, ids: Sequence[int]) -> str:
        return self._sql[name].replace("{ids}", placeholders(len(ids), "?"))

    def now(self) -> datetime:
        return parse_time(self._rows(self._sql["now"], ())[0][0])  # type: ignore[return-value]

    def queues_with_status(self, status: str) -> list[str]:
        return [row[0] for row in self._rows(self._sql["queues_with_status"], (status,))]

    def list_messages(
        self, queue: str, status: str | None, after_id: int, limit: int
    ) -> list[Message]:
        if status is None:
            return self._messages("list_all", (queue, after_id, limit))
        return self._messages("list_status", (queue, status, after_id, limit))

    def find_stalled(
        self, queue: str, older_than: float, after_id: int | None, limit: int
    ) -> list[Message]:
        if after_id is None:
            return self._messages("pick_stalled", (queue, offset(-older_than), limit))
        return self._messages("find_stalled", (queue, offset(-older_than), after_id, limit))

    def requeue_stalled(
        self,
        queue: str,
        ids: Sequence[int],
        older_than: float,
        max_errors: int,
        note: tuple[str, str],
    ) -> tuple[list[int], list[int]]:
        if not ids:
            return [], []
        bound = offset(-older_than)
        with self._write() as conn:  # the write lock: nothing changes between the two
            rows = conn.execute(self._with_ids("lock_stalled", ids), (*ids, queue, bound))
            found = rows.fetchall()
            ready = [row[0] for row in found if row[1] + 1 < max_errors]
            failed = [row[0] for row in found if row[1] + 1 >= max_errors]
            for name, chosen in (
                ("requeue_stalled_ready", ready),
                ("requeue_stalled_failed", failed),
            ):
                if chosen:
                    params = (*note, *chosen, queue, bound, max_errors)
                    conn.execute(self._with_ids(name, chosen), params)
        return ready, failed

    def _locked_change(
        self, lock: str, change: str, ids: Sequence[int], extra: Sequence[object]
    ) -> list[int]:
        """Lock those of ``ids`` still matching, then ``change`` exactly them."""
        if not ids:
            return []
        with self._write() as conn:
            found = conn.execute(self._with_ids(lock, ids), (*ids, *extra)).fetchall()
            chosen = [row[0] for row in found]
            if chosen:
                conn.execute(self._with_ids(change, chosen), (*chosen, *extra))
        return chosen

    def delete_stalled(self, queue: str, ids: Sequence[int], older_than: float) -> list[int]:
        bound = offset(-older_than)
        return self._locked_change("lock_stalled", "delete_stalled", ids, (queue, bound))

    def requeue_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "requeue_failed", ids, (queue,))

    def delete_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "delete_failed", ids, (queue,))

    def get_message(self, ident: int) -> Message | None:
        rows = self._rows(self._sql["get_message"], (ident,))
        return _listed(rows[0][:11], payload=bytes(rows[0][11])) if rows else None

    def change_by_id(self, action: str, ids: Sequence[int], force: bool) -> ByIdResult:
        result = ByIdResult()
        if not ids:
            return result
        with self._write() as conn:
            found = {
                row[0]: (row[1], row[2])
                for row in conn.execute(self._with_ids("lock_ids", ids), ids).fetchall()
            }
            for ident in dict.fromkeys(ids):
                if ident not in found:
                    result.missing.append(ident)
                elif found[ident][0] == "processing" and not force:
                    result.refused[ident] = found[ident][1] or "unknown"
                else:
                    result.done.append(ident)
            if result.done:
                statement = self._with_ids(f"{action}_ids", result.done)
                conn.execute(statement, result.done)
        return result

    def last_id(self, queue: str) -> int | None:
        return self._rows(self._sql["last_id"], (queue,))[0][0]

    def purge(self, queue: str, status: str | None, up_to_id: int, limit: int) -> int:
        if status is None:
            return self._change(self._sql["purge_live"], (queue, up_to_id, limit))
        return self._change(self._sql["purge_status"], (queue, status, up_to_id, limit))


def _listed(row: Sequence, payload: bytes | None = None) -> Message:
    """A Message from the "listed" columns (see sqlite.sql)."""
    return Message(
        id=row[0],
        queue=row[1],
        status=row[2],
        priority=row[3],
        error_count=row[4],
        created_at=parse_time(row[5]),  # type: ignore[arg-type]
        available_at=parse_time(row[6]),  # type: ignore[arg-type]
        unique_key=row[7],
        last_error=row[8],
        owner=row[9],
        heartbeat_at=parse_time(row[10]),
        payload=payload,
    )
