"""The operators' statements of the MySQL/MariaDB backend: gc, list, show, retry,
delete, purge.

A mixin of :class:`~mq_cli.backends.mysql.MysqlBackend`, which brings the
connection, the error wrapping and the deadlock retries; mysql.py keeps
producing and draining. The SQL is in sql/mysql.sql with the rest.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..models import ByIdResult, Message
from .base import Backend, placeholders

if TYPE_CHECKING:
    from .schema import Shape

T = TypeVar("T")


# mysql.py imports this module, so its helpers are imported when first used.
def utc(moment: datetime | None) -> datetime | None:
    from .mysql import utc

    return utc(moment)


def _text(value: bytes | str | None) -> str | None:
    from .mysql import _text

    return _text(value)


class MysqlOperate(Backend):
    """Operator methods; MysqlBackend provides the plumbing they use."""

    _sql: dict[str, str]
    conn: Any

    if TYPE_CHECKING:

        @abstractmethod
        def _errors(self) -> AbstractContextManager[None]: ...

        @abstractmethod
        def _begin(self) -> None: ...

        @abstractmethod
        def _transaction(self, body: Callable[[Any], T]) -> T: ...

        @abstractmethod
        def _change(self, sql: str, params: Sequence[object]) -> int: ...

    def _rows(self, sql: str, params: Sequence[object]) -> list[tuple]:
        with self._errors(), self.conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _messages(self, name: str, params: Sequence[object]) -> list[Message]:
        return [_listed(row) for row in self._rows(self._sql[name], params)]

    # -- schema (backends/schema.py decides; these only ask and run) --------

    def table_shape(self) -> Shape | None:
        from .schema import Shape

        columns = frozenset(
            str(row[0]) for row in self._rows(self._sql["table_columns"], (self.table,))
        )
        if not columns:
            return None
        indexes = self._rows(self._sql["table_indexes"], (self.table,))
        return Shape(columns, {str(name): bool(unique) for name, unique in indexes})

    def run_schema(self, name: str, params: Sequence[object] = ()) -> None:
        # DDL commits on its own in MySQL: no transaction to wrap it in.
        self._rows(self._sql[name], params)

    def run_schema_statement(self, statement: str) -> None:
        self._rows(statement, ())

    def probe_write(self) -> None:
        with self._errors():
            self._begin()
            try:
                with self.conn.cursor() as cursor:
                    cursor.execute(self._sql["probe_write"])
            finally:
                self.conn.rollback()

    def clock_read(
        self, host_key: str
    ) -> tuple[datetime, datetime | None, str | None, str | None, str | None]:
        now, newest, seen, step, host = self._rows(self._sql["clock_read"], (host_key,))[0]
        return utc(now), utc(newest), seen, step, host  # type: ignore[return-value]

    def clock_step_read(self) -> tuple[datetime, str | None]:
        now, step = self._rows(self._sql["clock_step"], ())[0]
        return utc(now), step  # type: ignore[return-value]

    def meta_put(self, values: dict[str, str]) -> None:
        def body(cursor: Any) -> None:
            for pair in values.items():
                cursor.execute(self._sql["meta_put"], pair)

        self._transaction(body)

    def clock_repair_back(self) -> int:
        return self._change(self._sql["clock_repair_back"], ())

    def unique_key_is_text(self) -> bool:
        rows = self._rows(self._sql["unique_key_type"], (self.table,))
        return bool(rows) and str(rows[0][0]).lower() in ("varchar", "char", "text")

    def _with_ids(self, name: str, ids: Sequence[int]) -> str:
        return self._sql[name].replace("{ids}", placeholders(len(ids), "%s"))

    def now(self) -> datetime:
        return utc(self._rows(self._sql["now"], ())[0][0])  # type: ignore[return-value]

    def queues_with_status(self, status: str) -> list[str]:
        return [str(row[0]) for row in self._rows(self._sql["queues_with_status"], (status,))]

    def list_messages(
        self, queue: str, status: str | None, after_id: int, limit: int
    ) -> list[Message]:
        if status is None:
            return self._messages("list_all", (queue, after_id, limit))
        return self._messages("list_status", (queue, status, after_id, limit))

    def find_stalled(
        self, queue: str, older_than: float, after_id: int | None, limit: int
    ) -> list[Message]:
        micros = int(older_than * 1_000_000)
        if after_id is None:
            return self._messages("pick_stalled", (queue, micros, limit))
        return self._messages("find_stalled", (queue, micros, after_id, limit))

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
        bound = int(older_than * 1_000_000)

        def body(cursor: Any) -> tuple[list[int], list[int]]:
            cursor.execute(self._with_ids("lock_stalled", ids), (*ids, queue, bound))
            found = cursor.fetchall()
            ready = [int(row[0]) for row in found if row[1] + 1 < max_errors]
            failed = [int(row[0]) for row in found if row[1] + 1 >= max_errors]
            for name, chosen in (
                ("requeue_stalled_ready", ready),
                ("requeue_stalled_failed", failed),
            ):
                if chosen:
                    params = (*note, *chosen, queue, bound, max_errors)
                    cursor.execute(self._with_ids(name, chosen), params)
            return ready, failed

        return self._transaction(body)

    def _locked_change(
        self, lock: str, change: str, ids: Sequence[int], extra: Sequence[object]
    ) -> list[int]:
        """Lock those of ``ids`` still matching (FOR UPDATE), then ``change`` exactly them."""
        if not ids:
            return []

        def body(cursor: Any) -> list[int]:
            cursor.execute(self._with_ids(lock, ids), (*ids, *extra))
            chosen = [int(row[0]) for row in cursor.fetchall()]
            if chosen:
                cursor.execute(self._with_ids(change, chosen), (*chosen, *extra))
            return chosen

        return self._transaction(body)

    def delete_stalled(self, queue: str, ids: Sequence[int], older_than: float) -> list[int]:
        bound = int(older_than * 1_000_000)
        return self._locked_change("lock_stalled", "delete_stalled", ids, (queue, bound))

    def requeue_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "requeue_failed", ids, (queue,))

    def delete_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "delete_failed", ids, (queue,))

    def get_message(self, ident: int) -> Message | None:
        rows = self._rows(self._sql["get_message"], (ident,))
        return _listed(rows[0][:11], payload=bytes(rows[0][11])) if rows else None

    def change_by_id(self, action: str, ids: Sequence[int], force: bool) -> ByIdResult:
        if not ids:
            return ByIdResult()

        def body(cursor: Any) -> ByIdResult:
            result = ByIdResult()  # afresh on each try: a deadlock retry runs it again
            cursor.execute(self._with_ids("lock_ids", ids), ids)
            found = {row[0]: (row[1], row[2]) for row in cursor.fetchall()}
            for ident in dict.fromkeys(ids):
                if ident not in found:
                    result.missing.append(ident)
                elif found[ident][0] == "processing" and not force:
                    result.refused[ident] = found[ident][1] or "unknown"
                else:
                    result.done.append(ident)
            if result.done:
                cursor.execute(self._with_ids(f"{action}_ids", result.done), result.done)
            return result

        return self._transaction(body)

    def last_id(self, queue: str) -> int | None:
        found = self._rows(self._sql["last_id"], (queue,))[0][0]
        return None if found is None else int(found)

    def purge(self, queue: str, status: str | None, up_to_id: int, limit: int) -> int:
        if status is None:
            return self._change(self._sql["purge_live"], (queue, up_to_id, limit))
        return self._change(self._sql["purge_status"], (queue, status, up_to_id, limit))


def _listed(row: Sequence, payload: bytes | None = None) -> Message:
    """A Message from the "listed" columns (see mysql.sql)."""
    return Message(
        id=int(row[0]),
        queue=str(row[1]),
        status=str(row[2]),
        priority=int(row[3]),
        error_count=int(row[4]),
        created_at=utc(row[5]),  # type: ignore[arg-type]
        available_at=utc(row[6]),  # type: ignore[arg-type]
        unique_key=_text(row[7]),
        last_error=row[8],
        owner=row[9],
        heartbeat_at=utc(row[10]),
        payload=payload,
    )
