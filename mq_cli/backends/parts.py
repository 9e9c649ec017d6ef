"""The parts a Backend is composed of, and how the Backend hands a call to one.

Each group of the Backend's operations is one part's: the schema and `mq init`,
the meta table (the clock record, pauses), the operators' reads and repairs, the
fleet limits' tables and the run log. The Protocols below are those parts'
interfaces (where each method is documented); ``base.Backend`` declares its parts
and forwards each method with :func:`by` (a plain method that hands the call on),
so callers keep calling ``backend.run_start(...)``. An SQL dialect's parts are the shared ``Sql*`` classes
(sqlschema.py, meta.py, sqlops.py, sqllimits.py, sqlrunlog.py), each built on
the dialect's narrow executor (plumbing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from mq_cli.backends.traits import Shape
from mq_cli.core.models import ByIdResult, Message, QueueStats, Run, Slice
from mq_cli.core.states import Action, State, Stored

P = ParamSpec("P")
R = TypeVar("R")


def by(part: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """``run_start = by("runlog", RunLogPart.run_start)``: a Backend method, with that
    signature and doc, that hands the call to the backend's ``runlog`` part."""
    name = method.__name__

    def forward(backend: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = getattr(getattr(backend, part), name)(*args, **kwargs)
        return result

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = method.__doc__
    return forward


class SchemaPart(Protocol):
    """The schema and `mq init` (backends/sqlschema.py)."""

    def init_schema(self) -> list[str]:
        """Create or migrate the table(s); idempotent. What was done, one line each."""

    def table_shape(self) -> Shape | None:
        """The queue table's columns and indexes as the database reports them; None if
        there is no such table."""

    def run_schema(self, name: str, params: Sequence[object] = ()) -> None:
        """Run one named schema statement (DDL, the version record) on its own."""

    def run_schema_statement(self, statement: str) -> None:
        """Run one DDL statement of :meth:`ddl` on its own."""

    def probe_write(self) -> None:
        """Insert a row and roll it back: raises DatabaseError when writes would fail."""

    def schema_version(self) -> int | None:
        """The recorded schema version, or None when the schema is missing."""


class MetaPart(Protocol):
    """The meta table: the clock record and the pauses (backends/meta.py)."""

    def clock_read(
        self, host_key: str
    ) -> tuple[datetime, datetime | None, str | None, str | None, str | None]:
        """The database's now, the newest message's created_at, and the meta values
        clock_seen, clock_step and ``host_key``."""

    def clock_step_read(self) -> tuple[datetime, str | None]:
        """The database's now and the meta value clock_step (a read only)."""

    def meta_put(self, values: dict[str, str]) -> None:
        """Set meta rows, in one transaction."""

    def meta_drop(self, names: Sequence[str]) -> int:
        """Delete meta rows, in one transaction; how many there were."""

    def clock_repair_back(self) -> int:
        """Ready messages created in the future (before a step back): created now,
        their delay kept. How many."""

    def paused(self) -> dict[str, str]:
        """{queue: since} for every paused queue."""

    def drain_notes(self) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        """What a drain reads as it starts, in one query: ({queue: since} of paused
        queues, {queue: (since, error)} of queues no drain could start)."""

    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pause or resume ``queue`` for every host; False when it already was so."""


class OperatePart(Protocol):
    """What operators do and see: stats, gc, list, show, retry, delete, purge (backends/sqlops.py)."""

    def stats(
        self, queue: str | None, stalled_after: Callable[[str], float], estimate: bool = False
    ) -> dict[str, QueueStats]:
        """Counts per queue (only queues that hold messages); ``estimate``: in bounded
        time, each count exact up to a bound and estimated beyond (backends/counts.py)."""

    def now(self) -> datetime:
        """The database's clock, UTC (ages and "available in" are measured with it)."""

    def queues_with_status(self, status: State | Stored) -> list[str]:
        """The queues holding at least one message in ``status``."""

    def list_messages(
        self, queue: str, status: State | Stored | None, after_id: int, limit: int
    ) -> list[Message]:
        """Up to ``limit`` messages with id > ``after_id``, by id; ``status`` None: any live one."""

    def list_key(self, queue: str, unique_key: str) -> list[Message]:
        """The live message of ``queue`` with ``unique_key`` (none or one), by the unique index."""

    def find_stalled(
        self, queue: str, older_than: float, after_id: int | None, limit: int
    ) -> list[Message]:
        """`processing` messages whose heartbeat is more than ``older_than`` seconds old:
        by id after ``after_id``, or (``after_id`` None) any ``limit`` of them, cheapest first."""

    def find_failed(self, queue: str, after_id: int | None, limit: int) -> list[Message]:
        """`failed` messages: by id after ``after_id``, or (None) any ``limit`` of them."""

    def requeue_stalled(
        self,
        queue: str,
        ids: Sequence[int],
        older_than: float,
        max_errors: int,
        note: tuple[str, str],
    ) -> tuple[list[int], list[int]]:
        """Those of ``ids`` still stalled back to `ready` with error_count + 1, or to
        `failed` when that reaches ``max_errors``; last_error = note[0] + owner + note[1].
        One transaction: the rows still matching are locked, then exactly they change.
        Returns (ids now ready, ids now failed)."""

    def delete_stalled(self, queue: str, ids: Sequence[int], older_than: float) -> list[int]:
        """Delete those of ``ids`` still stalled; the ids deleted."""

    def requeue_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` still `failed` back to `ready` now, error_count 0; their ids."""

    def delete_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete those of ``ids`` still `failed`; the ids deleted."""

    def get_message(self, ident: int) -> Message | None:
        """One live message with its payload, or None."""

    def change_by_id(self, action: Action, ids: Sequence[int], force: bool) -> ByIdResult:
        """``action`` "retry" (ready now, error_count 0) or "delete" on ``ids``, in one
        transaction; a `processing` message is refused unless ``force``."""

    def last_id(self, queue: str | None) -> int | None:
        """The highest id in ``queue`` (None: in the table; tombstones included), None when empty."""

    def purge(self, queue: str, status: State | Stored | None, up_to_id: int, limit: int) -> int:
        """Delete up to ``limit`` messages of ``queue`` with id <= ``up_to_id``: of
        ``status``, or (None) every live one; status "done" deletes tombstones. How many.
        "ready" is the state (due now), "delayed" the ones not due yet; "processing"
        every claimed message, stalled ones too (ops.operate tells the two apart)."""

    def owner_counts(self, queue: str, stalled_after: float) -> list[tuple[str | None, int, int]]:
        """(owner, processing messages, of them with a heartbeat older than
        ``stalled_after``) per owner of ``queue``'s `processing` messages."""

    # the console's finding (ops/columns.py, ops/failures.py, ops/search.py): reads only

    def payload_heads(self, ids: Sequence[int], size: int) -> dict[int, tuple[bytes, int]]:
        """{id: (the payload's first ``size`` bytes, its whole length)} of the live ones of ``ids``."""

    def failure_groups(
        self, queue: str, sample: int, groups: int
    ) -> list[tuple[str, str, int, datetime, datetime, int, int]]:
        """``queue``'s failed messages grouped by their error's key in SQL, over the first
        ``sample`` of them: (key, key lowered, count, oldest, newest, newest id, the
        sample's size) for the ``groups`` biggest; see <dialect>.sql."""

    def failure_matches(self, queue: str, sample: int, lowered: Sequence[str]) -> list[int]:
        """For each of ``lowered`` (keys as failure_groups lowered them): how many of the
        same sample hold it anywhere in last_error, in any case."""

    def search_ids(self, ids: Sequence[int]) -> list[Message]:
        """The live messages of ``ids`` (without payload)."""

    def search_queues(self, limit: int) -> list[str]:
        """Up to ``limit`` queues holding a row (tombstones too), by name, one index seek each."""

    def search_key(self, queue: str, key: str) -> list[Message]:
        """The live message of ``queue`` with unique key ``key``, if any."""

    def search_window(self, after_id: int, budget: int) -> tuple[int | None, int]:
        """(the last id, how many rows) of the ``budget`` rows after ``after_id`` by id."""

    def search_error(self, after_id: int, up_to_id: int, text: str, limit: int) -> list[Message]:
        """Up to ``limit`` live messages with after_id < id <= up_to_id whose last_error
        holds ``text`` (any case), by id."""


class LimitsPart(Protocol):
    """The fleet limits' tables: max_drains' slot rows, rate_limit's buckets (backends/sqllimits.py)."""

    def limits_missing(self) -> list[str]:
        """The fleet limits' tables that do not exist."""

    def slot_row_take(self, queue: str, slot: int, owner: str, stale_after: float) -> bool:
        """Take slot row ``slot`` of ``queue`` if free or its heartbeat is older than
        ``stale_after`` seconds; True when ``owner`` holds it now."""

    def slot_row_keep(self, queue: str, slot: int, owner: str) -> bool:
        """Refresh the heartbeat of a slot row ``owner`` holds; False when it lost it."""

    def slot_row_release(self, queue: str, slot: int, owner: str) -> None:
        """Free a slot row ``owner`` holds."""

    def slot_rows_in_use(self, queue: str, slots: int, stale_after: float) -> int:
        """How many of slot rows 0 .. ``slots`` - 1 have a fresh heartbeat."""

    def rate_state(self, queue: str) -> tuple[float, float, float] | None:
        """``queue``'s bucket: (per second, tokens now, seconds drains waited for
        tokens); None when no drain used one yet."""


class RunLogPart(Protocol):
    """The run log's tables (backends/sqlrunlog.py; times: Unix seconds, the database's clock)."""

    def runlog_access(self) -> dict[str, str]:
        """The run log's tables this user cannot read: {table: "missing" | "denied"}."""

    def run_start(
        self, owner: str, host: str, pid: int, queues: Sequence[str], queue: str, at: float
    ) -> int:
        """Record a drain run that started ``at``; its id."""

    def run_update(
        self,
        run_id: int,
        seen_at: float,
        queue: str | None,
        counts: tuple[int, int, int, int],
        running: tuple[int | None, float | None] = (None, None),
        ended: tuple[float, int, str | None] | None = None,
    ) -> None:
        """A run's counts (claimed, succeeded, failed, returned), the message it runs
        now (id, since), and when it ended with which exit code and why."""

    def run_request(self, run_id: int) -> tuple[str, str] | None:
        """An operator's request to a run ("stop" or "quiet", who asked); None if none."""

    def run_ask_stop(self, run_id: int, kind: str, by: str, at: float) -> bool:
        """Store a request to a run not ended yet (a "stop" is never made a "quiet");
        False when it ended or was asked to stop already."""

    def runs_add_columns(self) -> list[str]:
        """Add the runs table's columns of schema version 5 it lacks; their names."""

    def rollup_add(self, rows: Sequence[tuple[object, ...]]) -> None:
        """Store slices: (run_id, queue, start, end, done, failed, backlog, wait_sum,
        duration_sum, wait_hist, duration_hist), in one transaction."""

    def runlog_purge(self, before: float) -> int:
        """Delete a bounded number of runs and slices older than ``before``; how many."""

    def runs_live(self, seen_after: float) -> list[Run]:
        """Runs not ended and seen since ``seen_after``, oldest first."""

    def runs_recent(self, limit: int) -> list[Run]:
        """The last ``limit`` runs, newest first."""

    def rollup_since(self, since: float) -> list[Slice]:
        """The slices (not backlog samples) that ended at or after ``since``."""

    def rollup_totals(self) -> dict[str, tuple[int, int]]:
        """{queue: (done, failed)} over the whole retained history."""

    def rollup_series(
        self, step: float, since: float
    ) -> dict[str, list[tuple[float, int, int, int | None]]]:
        """{queue: [(step start, done, failed, largest backlog sampled or None)]} since ``since``."""

    def held_by_owner(self, queues: Iterable[str]) -> dict[str, int]:
        """{owner: how many processing messages it holds} on ``queues``."""
