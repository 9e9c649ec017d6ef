"""The interface every backend implements: what it does itself (connect, enqueue,
claim, acknowledge, liveness, wake-ups) and the parts it is composed of (parts.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from mq_cli.backends import liveness, parts
from mq_cli.backends.parts import by
from mq_cli.backends.sqlfiles import load_queries, placeholders
from mq_cli.backends.traits import Caps, Found
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

    def integrity(self) -> list[str]:
        """Problems the database's own consistency check finds ([] when none, or none
        is cheap enough to run: only SQLite has one)."""
        return []

    def unique_key_is_text(self) -> bool:
        """Whether unique_key still has the pre-version-1 text type (MySQL only)."""
        return False

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
        """``ack_success_many(done)`` then ``claim``: (how many deleted, the messages).
        The SQL dialects commit both at once (group_ack's batch end: one commit)."""
        return self.ack_success_many(done, owner) if done else 0, self.claim(queue, limit, owner)

    def claim_ahead_send(self, queue: str, limit: int, owner: str, done: Sequence[int]) -> bool:
        """Send :meth:`claim_acking` without waiting for it (its rows: claim_ahead_collect);
        False where the dialect cannot (then nothing was sent)."""
        return False

    def claim_ahead_collect(self) -> tuple[int, list[Message]]:
        """What the claim sent ahead deleted and took; ClaimUnknown if it was lost."""
        raise NotImplementedError

    def claim_ahead_settle(self) -> None:  # noqa: B027 - a no-op where nothing waits to be read
        """Read the claim sent ahead now, for claim_ahead_collect (MariaDB: its
        transaction ends; it holds the rows it selected until then)."""

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
    def release_owner(self, queue: str, owner: str, keep: Sequence[int] = ()) -> int:
        """Put back everything ``owner`` holds on ``queue`` but ``keep`` (a claim of
        unknown outcome)."""

    @abstractmethod
    def purge_tombstones(self, queue: str) -> int:
        """Delete expired unique-key tombstones (a bounded number per call)."""

    @abstractmethod
    def explain_claim(self, queue: str, limit: int) -> list[str]:
        """The database's plan for the claim query, one line per row."""

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

    # -- the parts: each group below is one part's, documented in parts.py ----------

    #: the schema and `mq init`:
    @property
    @abstractmethod
    def schema(self) -> parts.SchemaPart: ...

    init_schema = by("schema", parts.SchemaPart.init_schema)
    table_shape = by("schema", parts.SchemaPart.table_shape)
    run_schema = by("schema", parts.SchemaPart.run_schema)
    run_schema_statement = by("schema", parts.SchemaPart.run_schema_statement)
    probe_write = by("schema", parts.SchemaPart.probe_write)
    schema_version = by("schema", parts.SchemaPart.schema_version)

    #: the meta table: the clock record (mq_cli/host/clock.py decides what it means) and the
    #: pauses:
    @property
    @abstractmethod
    def meta(self) -> parts.MetaPart: ...

    clock_read = by("meta", parts.MetaPart.clock_read)
    clock_step_read = by("meta", parts.MetaPart.clock_step_read)
    meta_put = by("meta", parts.MetaPart.meta_put)
    meta_drop = by("meta", parts.MetaPart.meta_drop)
    clock_repair_back = by("meta", parts.MetaPart.clock_repair_back)
    paused = by("meta", parts.MetaPart.paused)
    drain_notes = by("meta", parts.MetaPart.drain_notes)
    set_paused = by("meta", parts.MetaPart.set_paused)

    #: what operators do and see (gc, list, show, retry, delete, purge). Messages come back
    #: without their payload (except from get_message), tombstones are never seen, and
    #: methods that take ``ids`` expect a bounded batch (at most OPERATE_BATCH), each its own
    #: short transaction:
    @property
    @abstractmethod
    def operate(self) -> parts.OperatePart: ...

    stats = by("operate", parts.OperatePart.stats)
    now = by("operate", parts.OperatePart.now)
    queues_with_status = by("operate", parts.OperatePart.queues_with_status)
    list_messages = by("operate", parts.OperatePart.list_messages)
    list_key = by("operate", parts.OperatePart.list_key)
    find_stalled = by("operate", parts.OperatePart.find_stalled)
    find_failed = by("operate", parts.OperatePart.find_failed)
    requeue_stalled = by("operate", parts.OperatePart.requeue_stalled)
    delete_stalled = by("operate", parts.OperatePart.delete_stalled)
    requeue_failed = by("operate", parts.OperatePart.requeue_failed)
    delete_failed = by("operate", parts.OperatePart.delete_failed)
    get_message = by("operate", parts.OperatePart.get_message)
    change_by_id = by("operate", parts.OperatePart.change_by_id)
    last_id = by("operate", parts.OperatePart.last_id)
    purge = by("operate", parts.OperatePart.purge)
    owner_counts = by("operate", parts.OperatePart.owner_counts)
    payload_heads = by("operate", parts.OperatePart.payload_heads)
    failure_groups = by("operate", parts.OperatePart.failure_groups)
    failure_matches = by("operate", parts.OperatePart.failure_matches)
    search_ids = by("operate", parts.OperatePart.search_ids)
    search_queues = by("operate", parts.OperatePart.search_queues)
    search_key = by("operate", parts.OperatePart.search_key)
    search_window = by("operate", parts.OperatePart.search_window)
    search_error = by("operate", parts.OperatePart.search_error)

    #: the fleet limits' tables (mq_cli/host/fleet.py, ratelimit.py):
    @property
    @abstractmethod
    def limits(self) -> parts.LimitsPart: ...

    limits_missing = by("limits", parts.LimitsPart.limits_missing)
    slot_row_take = by("limits", parts.LimitsPart.slot_row_take)
    slot_row_keep = by("limits", parts.LimitsPart.slot_row_keep)
    slot_row_release = by("limits", parts.LimitsPart.slot_row_release)
    slot_rows_in_use = by("limits", parts.LimitsPart.slot_rows_in_use)
    rate_state = by("limits", parts.LimitsPart.rate_state)

    #: the run log (mq_cli/drain/runlog.py; times: Unix seconds, the database's clock):
    @property
    @abstractmethod
    def runlog(self) -> parts.RunLogPart: ...

    runlog_access = by("runlog", parts.RunLogPart.runlog_access)
    run_start = by("runlog", parts.RunLogPart.run_start)
    run_update = by("runlog", parts.RunLogPart.run_update)
    run_request = by("runlog", parts.RunLogPart.run_request)
    run_ask_stop = by("runlog", parts.RunLogPart.run_ask_stop)
    runs_add_columns = by("runlog", parts.RunLogPart.runs_add_columns)
    rollup_add = by("runlog", parts.RunLogPart.rollup_add)
    runlog_purge = by("runlog", parts.RunLogPart.runlog_purge)
    runs_live = by("runlog", parts.RunLogPart.runs_live)
    runs_recent = by("runlog", parts.RunLogPart.runs_recent)
    rollup_since = by("runlog", parts.RunLogPart.rollup_since)
    rollup_totals = by("runlog", parts.RunLogPart.rollup_totals)
    rollup_series = by("runlog", parts.RunLogPart.rollup_series)
    held_by_owner = by("runlog", parts.RunLogPart.held_by_owner)

    #: the named statements that create the fleet limits' tables (`mq init`)
    limits_ddl: tuple[str, ...] = ()

    def listen(self, queue: str) -> int | None:
        """Be told of enqueues on ``queue`` from any host (PostgreSQL: LISTEN): the
        file descriptor that turns readable then, or None where there is no such
        thing (the FIFOs of host/wakeup.py serve one host only)."""
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
