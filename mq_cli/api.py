"""The Python API: what the CLI calls, and what applications import.

No click and no SQL here: SQL is in ``backends/``, rendering in ``cli/`` and ``core/``,
the operators' commands' logic in ``ops/``, the drain in ``drain/``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mq_cli.backends import dialects, open_backend
from mq_cli.backends.base import Backend
from mq_cli.core import payloads
from mq_cli.core.config import (
    Config,
    QueueConfig,
    load_config,
    validate_queue_name,
    validate_table_name,
)
from mq_cli.core.errors import ConfigError
from mq_cli.core.models import STATES, ByIdResult, GcReport, Listing, Message, QueueStats
from mq_cli.core.states import Action, State
from mq_cli.host import slots
from mq_cli.ops import produce

if TYPE_CHECKING:  # imported where used: a producer's start does not pay for the drain's
    from mq_cli.drain.report import DrainOptions, DrainReport
    from mq_cli.ops.browse import Filter, Page
    from mq_cli.ops.drains import StopAsked
    from mq_cli.ops.status import Status, Throughput


class MQ:
    """A connection to one queue table, opened lazily from a :class:`Config`."""

    def __init__(self, config: Config):
        self.config = config
        self._backend: Backend | None = None

    @property
    def backend(self) -> Backend:
        return self._open(reading=False)

    @property
    def _reader(self) -> Backend:
        """The backend, for what only reads: it never makes an existing SQLite file
        (empty, or another program's) into a queue; it says to run `mq init`."""
        return self._open(reading=True)

    def _open(self, reading: bool) -> Backend:
        if self._backend is None:
            from mq_cli.backends.schema import verify

            backend = open_backend(
                self.config.database,
                self.config.table,
                reading=reading,
                lock_dir=self.config.lock_dir,
            )
            try:
                # Once per connection, before anything is claimed or stored: a
                # table from a newer mq, or one missing a column or an index,
                # is refused here rather than half-used.
                verify(backend)
            except BaseException:
                backend.close()
                raise
            self._backend = backend
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __enter__(self) -> MQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queue(self, name: str) -> QueueConfig:
        return self.config.queue(name)

    # -- schema -----------------------------------------------------------

    def init(self) -> list[str]:
        """Create the table(s), or migrate and repair them; idempotent. What was done."""
        backend = open_backend(
            self.config.database, self.config.table, create=True, auto_init=False
        )
        try:
            return backend.init_schema()
        finally:
            backend.close()

    def ddl(self) -> list[str]:
        """The DDL `init` runs, without connecting to anything."""
        return dialects.get(self.config.database.kind).ddl(self.config.table)

    # -- producing --------------------------------------------------------

    def enqueue(self, queue: str, payload: object, *, delay: float = 0.0, priority: int = 0,
                unique_key: str | None = None) -> int | None:  # fmt: skip
        """Store one message; its id, or None if ``unique_key`` is already taken."""
        return self.enqueue_many(
            queue, [payload], delay=delay, priority=priority, unique_key=unique_key
        )[0]

    def enqueue_many(
        self,
        queue: str,
        values: Iterable[object],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
    ) -> list[int | None]:
        """Store many messages, encoded per the queue's format, in batched transactions."""
        fmt = self.queue(queue).format
        items = ((f"message {i}", payloads.encode(v, fmt)) for i, v in enumerate(values, 1))
        return produce.collect(
            self.enqueue_stream(
                queue, items, delay=delay, priority=priority, unique_key=unique_key, validate=False
            )
        )

    def enqueue_stream(
        self,
        queue: str,
        items: Iterable[tuple[str, bytes]],
        *,
        delay: float = 0.0,
        priority: int = 0,
        unique_key: str | None = None,
        validate: bool = True,
    ) -> Iterator[list[int | None]]:
        """Store ``(label, payload)`` items in batches, yielding each batch's ids once committed.

        At the first rejected item the messages before it are committed (and
        yielded), then InputRejected names the item; nothing after it is stored.
        """
        yield from produce.batches(
            lambda: self.backend,
            lambda: slots.database_dir(self.config),
            queue,
            items,
            produce.Options.of(self.queue(queue), delay, priority, unique_key, validate),
        )

    # -- consuming --------------------------------------------------------

    def drain(self, options: DrainOptions | None = None, **kwargs: Any) -> DrainReport:
        """Run handlers on ready messages until empty or a limit; see :class:`DrainOptions`.

        ``mq.drain(queues=["mail"], max_seconds=55)`` is the same as the crontab line
        ``mq drain -q mail --max-seconds 55``.
        """
        from mq_cli.drain.loop import Drain
        from mq_cli.drain.report import DrainOptions

        options = options or DrainOptions(**kwargs)
        for name in options.queues:
            validate_queue_name(name)
        return Drain(self.config, lambda: self.backend, options).run()

    # -- reading ----------------------------------------------------------

    def stats(self, queue: str | None = None, estimate: bool = False) -> dict[str, QueueStats]:
        """Counts of every configured queue and any other holding messages (see counts.py)."""
        if queue is not None:
            validate_queue_name(queue)
        from mq_cli.host import clock

        reader = self._reader
        state = clock.read(reader)

        def stalled_after(name: str) -> float:
            bound = self.queue(name).stalled_after
            if state is not None and state.stalled_resumes(bound) is not None:
                return 3e8  # a clock step: no heartbeat age means anything yet (~10 years)
            return bound

        found = reader.stats(queue, stalled_after, estimate)
        paused = reader.paused()
        names = [queue] if queue else sorted(set(found) | set(self.config.queues) | set(paused))
        result = {name: found.get(name, QueueStats()) for name in names}
        for name in set(paused) & set(result):
            result[name].paused = True
        return result

    def status(self, queue: str | None = None, estimate: bool = False) -> Status:
        """Live drains, recent runs and per-queue throughput from the run log (`mq status`)."""
        if queue is not None:
            validate_queue_name(queue)
        from mq_cli.ops.status import read

        return read(self, self._reader, queue, estimate)

    def status_page(self, status: Status, refresh: int = 60) -> str:
        """`mq status --html`'s page for ``status``, reloading itself every ``refresh``
        seconds (0: never); records a backlog sample per queue."""
        from mq_cli.ops import page as status_html

        return status_html.render(status_html.gather(self, self._reader, status), refresh)

    def run_log_figures(self) -> tuple[dict[str, tuple[int, int]], dict[str, Throughput]]:
        """({queue: (done, failed)} over the retained run log, {queue: the last hour});
        raises when this user cannot read the run log (missing tables, no SELECT)."""
        from mq_cli.host.runlog import problem
        from mq_cli.ops.status import hour_by_queue

        reader = self._reader
        unreadable = problem(reader)
        if unreadable is not None:
            raise unreadable
        return reader.rollup_totals(), hour_by_queue(reader, reader.now().timestamp())

    def history(self, now: float) -> tuple[dict[str, Any], float, float, float]:
        """What the status page's plots draw (ops/page.history), read only."""
        from mq_cli.ops import page

        return page.history(self, self._reader, now)

    def browse(self, queue: str, chosen: Filter, after: int = 0, limit: int = 50) -> Page:
        """A page of a queue's messages matching ``chosen`` after id ``after`` (the console)."""
        from mq_cli.ops import browse

        return browse.browse(self.config, self._reader, queue, chosen, after, limit)

    def pause(self, queue: str) -> bool:
        """Drains on every host skip ``queue`` until :meth:`resume`; enqueue still works.
        False when it was paused already."""
        validate_queue_name(queue)
        return self.backend.set_paused(queue, True)

    def resume(self, queue: str) -> bool:
        """Undo :meth:`pause`; False when it was not paused."""
        validate_queue_name(queue)
        return self.backend.set_paused(queue, False)

    def paused(self) -> dict[str, str]:
        """{queue: since (the database's time)} for every paused queue."""
        return self.backend.paused()

    def now(self) -> datetime:
        """The database's clock (UTC): every age mq shows is measured with it."""
        return self._reader.now()

    def list_messages(
        self, queue: str | None, status: State | str | None = None, limit: int = 100
    ) -> Listing:
        """The oldest ``limit`` messages of a queue (None: of every queue), by id, in one
        state if given: ready, delayed, processing, stalled or failed."""
        from mq_cli.ops import operate

        return operate.list_messages(self.config, self._reader, queue, status, limit)

    def show(self, ident: int) -> Message:
        """One message with its payload and last_error; NotFound (exit 1) if there is none."""
        from mq_cli.ops import operate

        return operate.show(self._reader, ident)

    def state(self, message: Message) -> State:
        """What `mq list` and `mq stats` call the message now: ready, delayed,
        processing, stalled (its drain is gone, or no heartbeat for stalled_after)
        or failed."""
        from mq_cli.ops import operate

        return operate.state_of(self.config, self._reader, message)

    def activity(
        self, message: Message, state: State | None = None
    ) -> tuple[str, float | None] | None:
        """A message held by a live drain: ("running", seconds so far) or ("waiting",
        None) in its drain's batch, as the run log tells; None when it cannot tell,
        and for any other message (``state``: :meth:`state`'s, if known already)."""
        from mq_cli.ops import operate

        return operate.show_activity(self._reader, message, state or self.state(message))

    # -- operating --------------------------------------------------------

    def gc(
        self,
        kind: State | str,
        *,
        queues: Sequence[str] = (),
        older_than: float | None = None,
        action: Action | str | None = None,
        notify: bool = False,
        on_batch: Callable[[list[Message]], None] | None = None,
    ) -> GcReport:
        """Find ``kind`` ("stalled" or "failed") messages; with ``action`` "requeue" or
        "delete" change them; with ``notify`` first call the queue's on_stalled/on_failed
        callback with them. ``on_batch`` sees each batch as it goes: the matches when
        listing, the messages changed (as they were found) with an action.
        ``mq.gc("stalled", action="requeue")`` is ``mq gc --stalled --requeue``."""
        from mq_cli.ops import operate

        return operate.Gc(
            self.config, self.backend if action or notify else self._reader, kind, queues=queues, older_than=older_than,
            action=action, notify=notify, on_batch=on_batch,
        ).run()  # fmt: skip

    def retry(self, ids: Sequence[int], force: bool = False) -> ByIdResult:
        """Back to ready now with error_count 0; a processing message only with ``force``."""
        from mq_cli.ops import operate

        return operate.change_by_id(self.backend, Action.RETRY, ids, force)

    def delete(self, ids: Sequence[int], force: bool = False) -> ByIdResult:
        """Delete messages by id; a processing message only with ``force``."""
        from mq_cli.ops import operate

        return operate.change_by_id(self.backend, Action.DELETE, ids, force)

    def require_known(self, queue: str, traces: bool = False, more: str = "") -> None:
        """ConfigError (exit 2) for a queue that is neither configured, nor holds a
        message, nor is paused (``traces``: the caller found none of its own either,
        ``more`` says which): a typo in -q must not look like an empty queue."""
        validate_queue_name(queue)
        if traces or queue in self.config.queues:
            return
        found = self.stats(queue, estimate=True)[queue]  # no mq schema says so here
        if found.paused or found != QueueStats():
            return
        existing = sorted(set(self.config.queues) | set(self.stats(estimate=True)))
        raise ConfigError(
            f"queue {queue!r} is unknown: not configured, no messages{more}; "
            f"queues: {', '.join(existing) or 'none'}"
        )

    def count(self, queue: str, state: State | str | None = None) -> int:
        """How many live messages a queue holds (in one of STATES), as `mq stats` counts."""
        counts = self.stats(queue)[queue]
        return sum(getattr(counts, s) for s in (STATES if state is None else [state]))

    def last_id(self, queue: str | None = None) -> int:
        """The highest id ``queue`` (None: any queue) holds (0: none): what an action
        confirmed now acts up to. Without a queue it is one read of the primary key; a
        queue's own reads each of its rows (seconds at millions)."""
        return self._reader.last_id(None if queue is None else validate_queue_name(queue)) or 0

    def stop_drain(self, name: str, quiet: bool = False, by: str | None = None) -> StopAsked:
        """`mq stop` (ops/drains.py): drain ``name`` stops as on SIGTERM, or ends ``quiet``ly."""
        from mq_cli.ops import drains

        return drains.ask(self.backend, name, quiet, by)

    def purge(
        self,
        queue: str,
        status: State | str | None = None,
        on_progress: Callable[[int], None] | None = None,
        force: bool = False,
        upto: int | None = None,
    ) -> int:
        """Delete a queue's messages (in one of STATES), up to id ``upto`` if given, in
        bounded batches; how many. Claimed ones (maybe running now) only with ``force``."""
        from mq_cli.ops import operate

        return operate.purge(self.config, self.backend, queue, status, on_progress, force, upto)


def connect(config: str | None = None, database: str | None = None) -> MQ:
    """An :class:`MQ` for a config file (or the lookup order) and/or a database URL."""
    return MQ(load_config(config, database))


def enqueue(
    queue: str,
    payload: object,
    *,
    connection: Any,
    table: str = "mq_messages",
    format: str = "json",
    delay: float = 0.0,
    priority: int = 0,
    unique_key: str | None = None,
    notify: bool = True,
) -> int | None:
    """Enqueue inside the caller's open PyMySQL, psycopg 3 or sqlite3 transaction.

    mq neither commits nor rolls back: the message exists if and only if the
    caller's transaction commits. The table must exist (`mq init`). Returns the
    new id, or None if ``unique_key`` is already taken on this queue. ``notify``
    (PostgreSQL): NOTIFY waiting drains on any host at the commit (the queue key
    of the same name; it costs producers that commit at once some throughput).
    """
    validate_queue_name(queue)
    validate_table_name(table)
    produce.check_options(priority, unique_key, delay)
    data = payloads.encode(payload, format)
    insert = dialects.for_connection(connection).insert_in_transaction
    return insert(connection, table, queue, data, delay, priority, unique_key, notify)
