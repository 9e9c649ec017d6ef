"""The operators' statements of every SQL backend: gc, list, show, retry, delete, purge.

A part of every SQL backend (parts.OperatePart), over the dialect's executor
(plumbing.py), which brings the connection, the retries and the dialect's time
parameters; sqlcore.py keeps producing and draining. Each dialect's statements are in
<dialect>/<dialect>.sql with the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from mq_cli.backends.plumbing import Executor, Tx
from mq_cli.core.models import ByIdResult, Message, QueueStats
from mq_cli.core.states import LIVE, Action, State, Stored

T = TypeVar("T")
#: a failure group as the backend reads it: (key, key lowered, count, oldest, newest,
#: newest id, the sample's size); see ops/failures.py
FailureGroupRow = tuple[str, str, int, datetime, datetime, int, int]

#: the largest id a BIGINT holds: a larger one names no message, and is never sent (it
#: would travel as a numeric, which pg_catalog compares with a bigint only by converting,
#: and not at all to SQLite)
MAX_ID = (1 << 63) - 1


def as_text(value: bytes | str | None) -> str | None:
    """unique_key may be stored as bytes (no collation, no padding): back to text."""
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray, memoryview)) else value


def shown_status(stored: str) -> Stored:
    """The status a message has for users: a 'delayed' row (not due yet when it was
    stored, see create_due_index in <dialect>/<dialect>.sql) is a ready message."""
    return Stored.READY if stored == Stored.DELAYED else Stored(stored)


def stored_statuses(status: Stored | State) -> tuple[Stored, Stored]:
    """The two stored statuses of a status users ask for (the same one twice but for ready)."""
    chosen = Stored(status.value)
    return (chosen, Stored.DELAYED) if chosen == Stored.READY else (chosen, chosen)


#: from this many messages a queue's page walks the primary key (list_all_by_id in
#: sqlite.sql) rather than sorting them all by id; below, the sort is cheaper
BY_ID = 10_000


class SqlOperate:
    """The operators' statements (parts.OperatePart) over a dialect's executor."""

    def __init__(self, db: Executor, dead_owners: Callable[[list[str | None]], set[str]]) -> None:
        self.db = db
        #: which owners' drains are gone, as their locks say (liveness.py)
        self.dead_owners = dead_owners

    def find_failed(self, queue: str, after_id: int | None, limit: int) -> list[Message]:
        if after_id is None:
            return self._messages("pick_failed", (queue, limit))
        return self.list_messages(queue, Stored.FAILED, after_id, limit)

    def _messages(self, name: str, params: Sequence[object]) -> list[Message]:
        """The rows a named query returns, as Messages."""
        return [self._listed(row) for row in self.db._rows(self.db._sql[name], params)]

    def _listed(self, row: Sequence[Any], payload: bytes | None = None) -> Message:
        """A Message from the "listed" columns (see <dialect>/<dialect>.sql)."""
        return Message(
            id=int(row[0]),
            queue=str(row[1]),
            status=shown_status(str(row[2])),
            priority=int(row[3]),
            error_count=int(row[4]),
            created_at=self.db._time(row[5]),  # type: ignore[arg-type]
            available_at=self.db._time(row[6]),  # type: ignore[arg-type]
            unique_key=as_text(row[7]),
            last_error=row[8],
            owner=row[9],
            heartbeat_at=self.db._time(row[10]),
            payload=payload,
        )

    def now(self) -> datetime:
        return self.db._time(self.db._rows(self.db._sql["now"])[0][0])  # type: ignore[return-value]

    def queues_with_status(self, status: State | Stored) -> list[str]:
        rows = self.db._rows(self.db._sql["queues_with_status"], stored_statuses(status))
        return [str(row[0]) for row in rows]

    def list_messages(
        self, queue: str, status: State | Stored | None, after_id: int, limit: int
    ) -> list[Message]:
        statuses = LIVE if status is None else stored_statuses(status) * 2
        name = "list_all" if status is None else "list_status"
        if "count_bounded" in self.db._sql:  # a dialect without a planner's statistics
            held = self.db._rows(self.db._sql["count_bounded"], (queue, *statuses, BY_ID))
            name += "_by_id" if int(held[0][0]) >= BY_ID else ""
        if status is None:
            return self._messages(name, (queue, after_id, limit))
        return self._messages(name, (queue, *stored_statuses(status), after_id, limit))

    def list_key(self, queue: str, unique_key: str) -> list[Message]:
        return self._messages("list_key", (queue, unique_key))

    def find_stalled(
        self, queue: str, older_than: float, after_id: int | None, limit: int
    ) -> list[Message]:
        bound = self.db._shift(-older_than)
        if after_id is None:
            return self._messages("pick_stalled", (queue, bound, limit))
        return self._messages("find_stalled", (queue, bound, after_id, limit))

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
        bound = self.db._shift(-older_than)

        def body(tx: Tx) -> tuple[list[int], list[int]]:
            found = tx.rows(self.db._with_ids("lock_stalled", ids), (*ids, queue, bound))
            ready = [int(row[0]) for row in found if row[1] + 1 < max_errors]
            failed = [int(row[0]) for row in found if row[1] + 1 >= max_errors]
            for name, chosen in (
                ("requeue_stalled_ready", ready),
                ("requeue_stalled_failed", failed),
            ):
                if chosen:
                    params = (*note, *chosen, queue, bound, max_errors)
                    tx.change(self.db._with_ids(name, chosen), params)
            return ready, failed

        return self.db._transaction(body)

    def _locked_change(
        self, lock: str, change: str, ids: Sequence[int], extra: Sequence[object]
    ) -> list[int]:
        """Lock those of ``ids`` still matching, then ``change`` exactly them."""
        if not ids:
            return []

        def body(tx: Tx) -> list[int]:
            chosen = [int(row[0]) for row in tx.rows(self.db._with_ids(lock, ids), (*ids, *extra))]
            if chosen:
                tx.change(self.db._with_ids(change, chosen), (*chosen, *extra))
            return chosen

        return self.db._transaction(body)

    def delete_stalled(self, queue: str, ids: Sequence[int], older_than: float) -> list[int]:
        bound = self.db._shift(-older_than)
        return self._locked_change("lock_stalled", "delete_stalled", ids, (queue, bound))

    def requeue_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "requeue_failed", ids, (queue,))

    def delete_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._locked_change("lock_failed", "delete_failed", ids, (queue,))

    def get_message(self, ident: int) -> Message | None:
        if not 0 < ident <= MAX_ID:
            return None
        rows = self.db._rows(self.db._sql["get_message"], (ident,))
        return self._listed(rows[0][:11], payload=bytes(rows[0][11])) if rows else None

    def change_by_id(self, action: Action, ids: Sequence[int], force: bool) -> ByIdResult:
        if not ids:
            return ByIdResult()

        real = [ident for ident in ids if 0 < ident <= MAX_ID]

        def body(tx: Tx) -> ByIdResult:
            result = ByIdResult()  # afresh on each try: a deadlock retry runs it again
            locked = tx.rows(self.db._with_ids("lock_ids", real), real) if real else []
            found = {row[0]: (row[1], row[2]) for row in locked}
            for ident in dict.fromkeys(ids):
                if ident not in found:
                    result.missing.append(ident)
                elif found[ident][0] == Stored.PROCESSING and not force:
                    result.refused[ident] = found[ident][1] or "unknown"
                else:
                    result.done.append(ident)
            if result.done:
                tx.change(self.db._with_ids(f"{action}_ids", result.done), result.done)
            return result

        return self.db._transaction(body)

    def last_id(self, queue: str | None) -> int | None:
        if queue is None:
            found = self.db._rows(self.db._sql["last_id_any"], ())[0][0]
        else:
            found = self.db._rows(self.db._sql["last_id"], (queue,))[0][0]
        return None if found is None else int(found)

    def purge(self, queue: str, status: State | Stored | None, up_to_id: int, limit: int) -> int:
        if status is None:
            return self.db._change(self.db._sql["purge_live"], (queue, up_to_id, limit))
        if status in (State.READY, State.DELAYED):  # the states: ready never includes delayed
            name = "purge_due" if status == State.READY else "purge_delayed"
            return self.db._change(self.db._sql[name], (queue, up_to_id, limit))
        params = (queue, *stored_statuses(status), up_to_id, limit)
        return self.db._change(self.db._sql["purge_status"], params)

    def owner_counts(self, queue: str, stalled_after: float) -> list[tuple[str | None, int, int]]:
        rows = self.db._rows(self.db._sql["owner_counts"], (self.db._shift(-stalled_after), queue))
        return [(row[0], int(row[1]), int(row[2] or 0)) for row in rows]

    def stats(
        self, queue: str | None, stalled_after: Callable[[str], float], estimate: bool = False
    ) -> dict[str, QueueStats]:
        if estimate:
            from mq_cli.backends.counts import ESTIMATE_ABOVE, bounded

            return bounded(self, queue, stalled_after, ESTIMATE_ABOVE)
        where = f"AND queue = {self.db.mark}" if queue else ""
        result: dict[str, QueueStats] = {}
        rows = self.db._rows(
            self.db._sql["stats"].replace("{queue_filter}", where), (queue,) if queue else ()
        )
        for name, ready, delayed, processing, failed, oldest in rows:
            stalled = 0
            if processing:
                counts = self.owner_counts(name, stalled_after(name))
                dead = self.dead_owners([owner for owner, _, _ in counts])
                stalled = sum(total if owner in dead else old for owner, total, old in counts)
            result[name] = QueueStats(
                ready=int(ready),
                delayed=int(delayed),
                processing=int(processing) - stalled,
                stalled=stalled,
                failed=int(failed),
                oldest_ready_seconds=max(float(oldest), 0.0) if oldest is not None else None,
            )
        return result

    # -- the console's finding (ops/columns.py, ops/failures.py, ops/search.py) --------

    def payload_heads(self, ids: Sequence[int], size: int) -> dict[int, tuple[bytes, int]]:
        real = [ident for ident in ids if 0 < ident <= MAX_ID]
        if not real:
            return {}
        rows = self.db._rows(self.db._with_ids("payload_heads", real), (size, *real))
        return {int(row[0]): (bytes(row[1] or b""), int(row[2])) for row in rows}

    def failure_groups(self, queue: str, sample: int, groups: int) -> list[FailureGroupRow]:
        found: list[FailureGroupRow] = []
        for row in self.db._rows(self.db._sql["failure_groups"], (queue, sample, groups)):
            oldest, newest = self.db._time(row[3]), self.db._time(row[4])
            assert oldest is not None and newest is not None  # a group has rows
            found.append(
                (str(row[0]), str(row[1]), int(row[2]), oldest, newest, int(row[5]), int(row[6]))
            )
        return found

    def failure_matches(self, queue: str, sample: int, lowered: Sequence[str]) -> list[int]:
        if not lowered:
            return []
        one = self.db._sql["failure_match"]
        sql = self.db._sql["failure_matches"].replace("{matches}", ", ".join([one] * len(lowered)))
        return [int(n or 0) for n in self.db._rows(sql, (*lowered, queue, sample))[0]]

    def search_ids(self, ids: Sequence[int]) -> list[Message]:
        real = [ident for ident in ids if 0 < ident <= MAX_ID]
        return self._messages_in(self.db._with_ids("search_ids", real), real) if real else []

    def search_queues(self, limit: int) -> list[str]:
        return [str(row[0]) for row in self.db._rows(self.db._sql["search_queues"], (limit,))]

    def search_key(self, queue: str, key: str) -> list[Message]:
        return self._messages("search_key", (queue, key))

    def search_window(self, after_id: int, budget: int) -> tuple[int | None, int]:
        end, count = self.db._rows(self.db._sql["search_window"], (after_id, budget))[0]
        return (None if end is None else int(end)), int(count)

    def search_error(self, after_id: int, up_to_id: int, text: str, limit: int) -> list[Message]:
        params = (after_id, up_to_id, text.lower(), limit)
        return self._messages("search_error", params)

    def _messages_in(self, sql: str, params: Sequence[object]) -> list[Message]:
        return [self._listed(row) for row in self.db._rows(sql, params)]
