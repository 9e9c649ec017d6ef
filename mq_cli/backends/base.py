"""The interface every backend implements, and the loader for its named SQL blocks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from mq_cli.backends import liveness
from mq_cli.backends.sqlfiles import load_queries, placeholders
from mq_cli.backends.traits import Caps, Found, Shape
from mq_cli.core.models import ByIdResult, Message, QueueStats, Run, Slice
from mq_cli.core.version import SCHEMA_VERSION

#: ids per operator statement (gc, retry, delete, purge): each batch is its own
#: short transaction, so clearing a million rows never holds a long lock
OPERATE_BATCH = 1000


class Backend(ABC):
    """One open connection to a queue table, with every operation mq needs.

    Each method is its own short transaction and commits before it returns,
    so no transaction stays open while a handler runs.
    """

    kind: str
    caps: Caps = Caps()
    table: str
    #: the largest payload this database takes in one statement
    max_payload: int

    def payload_fits(self, payload: bytes) -> bool:
        """Whether one message of this size can be stored."""
        return len(payload) <= self.max_payload

    @abstractmethod
    def ddl(self) -> list[str]:
        """The statements `mq init` runs (and `--print-sql` prints)."""

    #: the named statements that create the run log's tables (`mq init`)
    runlog_ddl: tuple[str, ...] = ()

    #: columns of this dialect's table beyond schema.COLUMNS
    extra_columns: tuple[str, ...] = ()

    def unique_index_columns(self) -> list[str]:
        """The columns of the unique-key index, in order ([] when it is missing)."""
        return []

    @abstractmethod
    def init_schema(self) -> list[str]:
        """Create or migrate the table(s); idempotent. What was done, one line each."""

    @abstractmethod
    def table_shape(self) -> Shape | None:
        """The queue table's columns and indexes as the database reports them; None if
        there is no such table."""

    @abstractmethod
    def run_schema(self, name: str, params: Sequence[object] = ()) -> None:
        """Run one named schema statement (DDL, the version record) on its own."""

    @abstractmethod
    def run_schema_statement(self, statement: str) -> None:
        """Run one DDL statement of :meth:`ddl` on its own."""

    @abstractmethod
    def probe_write(self) -> None:
        """Insert a row and roll it back: raises DatabaseError when writes would fail."""

    def integrity(self) -> list[str]:
        """Problems the database's own consistency check finds ([] when none, or none
        is cheap enough to run: only SQLite has one)."""
        return []

    # -- the clock record (mq_cli/drain/clock.py decides what it means) ----------

    @abstractmethod
    def clock_read(
        self, host_key: str
    ) -> tuple[datetime, datetime | None, str | None, str | None, str | None]:
        """The database's now, the newest message's created_at, and the meta values
        clock_seen, clock_step and ``host_key``."""

    @abstractmethod
    def clock_step_read(self) -> tuple[datetime, str | None]:
        """The database's now and the meta value clock_step (a read only)."""

    @abstractmethod
    def meta_put(self, values: dict[str, str]) -> None:
        """Set meta rows, in one transaction."""

    @abstractmethod
    def meta_drop(self, names: Sequence[str]) -> int:
        """Delete meta rows, in one transaction; how many there were."""

    @abstractmethod
    def clock_repair_back(self) -> int:
        """Ready messages created in the future (before a step back): created now,
        their delay kept. How many."""

    def unique_key_is_text(self) -> bool:
        """Whether unique_key still has the pre-version-1 text type (MySQL only)."""
        return False

    @abstractmethod
    def schema_version(self) -> int | None:
        """The recorded schema version, or None when the schema is missing."""

    @abstractmethod
    def enqueue(
        self,
        queue: str,
        payloads: Sequence[bytes],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
        wake: bool = True,
    ) -> list[int | None]:
        """Store the payloads in one transaction; ids in order, None where skipped.
        ``wake``: tell waiting drains on other hosts, where the database can
        (PostgreSQL's NOTIFY)."""

    @abstractmethod
    def stats(
        self, queue: str | None, stalled_after: Callable[[str], float]
    ) -> dict[str, QueueStats]:
        """Counts per queue (only queues that hold messages)."""

    # -- draining ---------------------------------------------------------

    @abstractmethod
    def claim(self, queue: str, limit: int, owner: str) -> list[Message]:
        """Mark up to ``limit`` ready messages `processing` for ``owner``; return them."""

    @abstractmethod
    def claim_limited(
        self, queue: str, limit: int, owner: str, per_second: float, slept: float
    ) -> tuple[list[Message], float | None]:
        """``claim`` under the queue's token bucket (rate_limit, one transaction): at
        most as many as it grants; ``slept``: seconds the caller waited for tokens
        (added up for `mq status`). Returns (the messages, None), or, when no token
        was due while messages are ready, ([], seconds until the next one is)."""

    @abstractmethod
    def ack_success(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        """Delete a succeeded message (or keep a tombstone of its unique key for
        ``retention`` seconds). False when ``owner`` no longer holds it."""

    def ack_success_send(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        """Send ``ack_success`` without waiting for its commit, when this dialect can;
        False when it did not (the caller runs ``ack_success``). At most one is in
        flight: its result is read before the connection does anything else."""
        return False

    def ack_success_collect(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        """The result of ``ack_success_send``: what ``ack_success`` would have returned.
        Sent on a connection that broke since, it runs ``ack_success`` again, so False
        may mean the first one landed: the caller looks at the row."""
        raise NotImplementedError

    @abstractmethod
    def ack_success_many(self, ids: Sequence[int], owner: str) -> int:
        """Delete several succeeded messages in one statement; how many were still ours."""

    def claim_acking(
        self, queue: str, limit: int, owner: str, done: Sequence[int]
    ) -> tuple[int, list[Message]]:
        """``ack_success_many(done)`` then ``claim``: (how many deleted, the messages). A
        dialect that can commits both at once (group_ack's batch end: one commit)."""
        return self.ack_success_many(done, owner) if done else 0, self.claim(queue, limit, owner)

    @abstractmethod
    def ack_failure(
        self, message: Message, owner: str, error: str, retry_in: float, failed: bool
    ) -> bool:
        """Record a failure: back to `ready` after ``retry_in`` seconds, or `failed`."""

    @abstractmethod
    def heartbeat(self, ids: Sequence[int], owner: str) -> int:
        """Refresh the heartbeat of the messages ``owner`` holds."""

    @abstractmethod
    def release(self, ids: Sequence[int], owner: str) -> int:
        """Put claimed, unstarted messages back to `ready` at their old place."""

    @abstractmethod
    def owned(self, ids: Sequence[int], owner: str) -> list[int]:
        """Which of ``ids`` ``owner`` still holds."""

    @abstractmethod
    def release_owner(self, queue: str, owner: str) -> int:
        """Put back everything ``owner`` holds on ``queue`` (a claim of unknown outcome)."""

    @abstractmethod
    def purge_tombstones(self, queue: str) -> int:
        """Delete expired unique-key tombstones (a bounded number per call)."""

    @abstractmethod
    def explain_claim(self, queue: str, limit: int) -> list[str]:
        """The database's plan for the claim query, one line per row."""

    # -- operating (gc, list, show, retry, delete, purge) -------------------
    #
    # Messages come back without their payload (except from get_message), and
    # tombstones (status 'done') are never seen. Methods that take ``ids``
    # expect a bounded batch (callers pass at most OPERATE_BATCH); each call is
    # its own short transaction.

    @abstractmethod
    def now(self) -> datetime:
        """The database's clock, UTC (ages and "available in" are measured with it)."""

    @abstractmethod
    def queues_with_status(self, status: str) -> list[str]:
        """The queues holding at least one message in ``status``."""

    @abstractmethod
    def list_messages(
        self, queue: str, status: str | None, after_id: int, limit: int
    ) -> list[Message]:
        """Up to ``limit`` messages with id > ``after_id``, by id; ``status`` None: any live one."""

    @abstractmethod
    def find_stalled(
        self, queue: str, older_than: float, after_id: int | None, limit: int
    ) -> list[Message]:
        """`processing` messages whose heartbeat is more than ``older_than`` seconds old:
        by id after ``after_id``, or (``after_id`` None) any ``limit`` of them, cheapest first."""

    def find_failed(self, queue: str, after_id: int | None, limit: int) -> list[Message]:
        """`failed` messages: by id after ``after_id``, or (None) any ``limit`` of them."""
        if after_id is None:
            return self._messages("pick_failed", (queue, limit))
        return self.list_messages(queue, "failed", after_id, limit)

    @abstractmethod
    def _messages(self, name: str, params: Sequence[object]) -> list[Message]:
        """The rows a named query (its backend's SQL) returns, as Messages."""

    @abstractmethod
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

    @abstractmethod
    def delete_stalled(self, queue: str, ids: Sequence[int], older_than: float) -> list[int]:
        """Delete those of ``ids`` still stalled; the ids deleted."""

    @abstractmethod
    def requeue_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` still `failed` back to `ready` now, error_count 0; their ids."""

    @abstractmethod
    def delete_failed(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete those of ``ids`` still `failed`; the ids deleted."""

    @abstractmethod
    def get_message(self, ident: int) -> Message | None:
        """One live message with its payload, or None."""

    @abstractmethod
    def change_by_id(self, action: str, ids: Sequence[int], force: bool) -> ByIdResult:
        """``action`` "retry" (ready now, error_count 0) or "delete" on ``ids``, in one
        transaction; a `processing` message is refused unless ``force``."""

    @abstractmethod
    def last_id(self, queue: str) -> int | None:
        """The highest id in ``queue`` (tombstones included), None when empty."""

    @abstractmethod
    def purge(self, queue: str, status: str | None, up_to_id: int, limit: int) -> int:
        """Delete up to ``limit`` messages of ``queue`` with id <= ``up_to_id``: of
        ``status``, or (None) every live one; status "done" deletes tombstones. How many."""

    def health(self) -> list[Found]:
        """(name, healthy, one line[, warn]) for what only this database can tell `mq
        check` (PostgreSQL: long transactions, dead rows piling up; every dialect: a
        table grown in a way that costs, backends/bloat.py)."""
        return []

    def vacuum_horizon(self) -> dict[str, Any] | None:
        """What holds the vacuum horizon, for `mq status --json` (PostgreSQL only)."""
        return None

    def server_mode(self) -> tuple[bool, str]:
        """(healthy, one line): what kind of server mq runs on, for `mq check`."""
        return True, self.kind

    def route_checks(self) -> list[tuple[str, bool, str, bool]]:
        """(name, ok, one line, warn) for `mq check` about what sits between mq and the
        server (PostgreSQL: a pooler, and what it degrades)."""
        return []

    # -- liveness: a lock each drain holds while it runs (mq_cli/backends/liveness.py) -------

    #: where this host's drains keep their lock files (SQLite's liveness)
    lock_dir: str = ""

    @property
    def lock_scope(self) -> str:
        """What mq's server lock names (fleet slots) carry beside the queue: the table,
        or the database and table where a lock is server-wide, not per database."""
        return self.table

    def live_lock_take(self, owner: str) -> bool | None:
        """Take ``owner``'s lock for this session: True, False when someone holds it,
        None when this server cannot give one that dies with the session (Galera,
        a pooler)."""
        return None

    def live_lock_free(self, owner: str) -> bool:
        """Whether nobody holds ``owner``'s lock (a read)."""
        return False

    def live_lock_seize(self, owner: str) -> bool:
        """Take a (presumably dead) ``owner``'s lock if free; True when taken."""
        return False

    def live_lock_release(self, owner: str) -> None:  # noqa: B027 - nothing to release
        """Give back a lock live_lock_take or live_lock_seize took."""

    def dead_owners(self, owners: Sequence[str | None]) -> set[str]:
        """Those of ``owners`` whose drain is gone, as its lock says."""
        return liveness.dead_owners(self, self.lock_dir, owners)

    @abstractmethod
    def probe(self) -> None:
        """One round trip: raises ConnectionLost when the session is gone."""

    @abstractmethod
    def processing_owners(self, queue: str) -> list[str]:
        """The owners of ``queue``'s `processing` messages (at most 1,000)."""

    @abstractmethod
    def mark_dead(self, queue: str, owner: str) -> int:
        """Make ``owner``'s `processing` messages of ``queue`` stalled now (its lock is
        free and held by the caller); how many."""

    @abstractmethod
    def owner_counts(self, queue: str, stalled_after: float) -> list[tuple[str | None, int, int]]:
        """(owner, processing messages, of them with a heartbeat older than
        ``stalled_after``) per owner of ``queue``'s `processing` messages."""

    @abstractmethod
    def paused(self) -> dict[str, str]:
        """{queue: since} for every paused queue."""

    @abstractmethod
    def drain_notes(self) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        """What a drain reads as it starts, in one query: ({queue: since} of paused
        queues, {queue: (since, error)} of queues no drain could start)."""

    @abstractmethod
    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pause or resume ``queue`` for every host; False when it already was so."""

    # -- fleet limits (mq_cli/fleet.py, mq_cli/ratelimit.py) ------------------------

    #: the named statements that create the fleet limits' tables (`mq init`)
    limits_ddl: tuple[str, ...] = ()

    @abstractmethod
    def limits_missing(self) -> list[str]:
        """The fleet limits' tables that do not exist."""

    @abstractmethod
    def slot_row_take(self, queue: str, slot: int, owner: str, stale_after: float) -> bool:
        """Take slot row ``slot`` of ``queue`` if free or its heartbeat is older than
        ``stale_after`` seconds; True when ``owner`` holds it now."""

    @abstractmethod
    def slot_row_keep(self, queue: str, slot: int, owner: str) -> bool:
        """Refresh the heartbeat of a slot row ``owner`` holds; False when it lost it."""

    @abstractmethod
    def slot_row_release(self, queue: str, slot: int, owner: str) -> None:
        """Free a slot row ``owner`` holds."""

    @abstractmethod
    def slot_rows_in_use(self, queue: str, slots: int, stale_after: float) -> int:
        """How many of slot rows 0 .. ``slots`` - 1 have a fresh heartbeat."""

    @abstractmethod
    def rate_state(self, queue: str) -> tuple[float, float, float] | None:
        """``queue``'s bucket: (per second, tokens now, seconds drains waited for
        tokens); None when no drain used one yet."""

    # -- the run log (mq_cli/drain/runlog.py; times: Unix seconds, the database's clock) --

    @abstractmethod
    def runlog_access(self) -> dict[str, str]:
        """The run log's tables this user cannot read: {table: "missing" | "denied"}."""

    @abstractmethod
    def run_start(
        self, owner: str, host: str, pid: int, queues: Sequence[str], queue: str, at: float
    ) -> int:
        """Record a drain run that started ``at``; its id."""

    @abstractmethod
    def run_update(
        self,
        run_id: int,
        seen_at: float,
        queue: str | None,
        counts: tuple[int, int, int, int],
        running: tuple[int | None, float | None] = (None, None),
        ended: tuple[float, int] | None = None,
    ) -> None:
        """A run's counts (claimed, succeeded, failed, returned), the message it runs
        now (id, since), and when it ended with which exit code."""

    @abstractmethod
    def rollup_add(self, rows: Sequence[tuple[object, ...]]) -> None:
        """Store slices: (run_id, queue, start, end, done, failed, backlog, wait_sum,
        duration_sum, wait_hist, duration_hist), in one transaction."""

    @abstractmethod
    def runlog_purge(self, before: float) -> int:
        """Delete a bounded number of runs and slices older than ``before``; how many."""

    @abstractmethod
    def runs_live(self, seen_after: float) -> list[Run]:
        """Runs not ended and seen since ``seen_after``, oldest first."""

    @abstractmethod
    def runs_recent(self, limit: int) -> list[Run]:
        """The last ``limit`` runs, newest first."""

    @abstractmethod
    def rollup_since(self, since: float) -> list[Slice]:
        """The slices (not backlog samples) that ended at or after ``since``."""

    @abstractmethod
    def rollup_totals(self) -> dict[str, tuple[int, int]]:
        """{queue: (done, failed)} over the whole retained history."""

    @abstractmethod
    def rollup_series(
        self, step: float, since: float
    ) -> dict[str, list[tuple[float, int, int, int | None]]]:
        """{queue: [(step start, done, failed, largest backlog sampled or None)]} since ``since``."""

    @abstractmethod
    def held_by_owner(self, queues: Iterable[str]) -> dict[str, int]:
        """{owner: how many processing messages it holds} on ``queues``."""

    def listen(self, queue: str) -> int | None:
        """Be told of enqueues on ``queue`` from any host (PostgreSQL: LISTEN): the
        file descriptor that turns readable then, or None where there is no such
        thing (the FIFOs of wakeup.py serve one host only)."""
        return None

    def listen_fd(self) -> int | None:
        """listen()'s descriptor as it is now (a reconnect replaces it)."""
        return None

    def woken(self, queue: str) -> bool:
        """After listen()'s descriptor turned readable: whether ``queue`` was named."""
        return False

    def reconnect(self) -> None:  # noqa: B027 - SQLite has nothing to reconnect
        """Open a fresh connection after a lost one (a server connection: MySQL, PostgreSQL)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "OPERATE_BATCH",
    "SCHEMA_VERSION",
    "Backend",
    "ByIdResult",
    "Message",
    "QueueStats",
    "Run",
    "Slice",
    "load_queries",
    "placeholders",
]
