"""Producing: the checks an enqueue's options get, and the batches a stream of
payloads is stored in (``MQ.enqueue_stream``, ``MQ.enqueue_many``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from mq_cli.backends.base import Backend
from mq_cli.core import payloads
from mq_cli.core.config import QueueConfig
from mq_cli.core.durations import format_duration, parse_duration
from mq_cli.core.errors import CommitUnknown, ConfigError, InputRejected, MqError, PayloadTooLarge
from mq_cli.host import wakeup

# A batch is committed when it holds this many messages or this many bytes.
BATCH_MESSAGES = 1000
BATCH_BYTES = 4 << 20
MAX_UNIQUE_KEY = 255


def check_options(priority: int, unique_key: str | None, delay: float) -> None:
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not -(2**31) <= priority < 2**31
    ):
        raise ConfigError(f"priority must be a whole number between {-(2**31)} and {2**31 - 1}")
    if unique_key is not None and not 1 <= len(unique_key) <= MAX_UNIQUE_KEY:
        raise ConfigError(f"a unique key is 1 to {MAX_UNIQUE_KEY} characters")
    if unique_key is not None and "\x00" in unique_key:
        # PostgreSQL's text cannot hold it; refused on every backend alike.
        raise ConfigError("a unique key cannot contain a NUL character")
    try:
        parse_duration(delay)
    except ValueError as exc:
        raise ConfigError(f"delay: {exc}") from None


@dataclass(frozen=True)
class Options:
    """How a stream is stored: the queue's format and notify, and the enqueue's options."""

    fmt: str
    wake: bool
    delay: float
    priority: int
    unique_key: str | None
    validate: bool
    #: the queue's unique_retention as this config sets it: whether a keyed retry
    #: after a COMMIT mq cannot vouch for is safe (retry_advice)
    unique_retention: float = 0.0

    @classmethod
    def of(
        cls, queue: QueueConfig, delay: float, priority: int, key: str | None, validate: bool
    ) -> Options:
        """The options of an enqueue to ``queue`` (its config)."""
        return cls(
            queue.format, queue.notify, delay, priority, key, validate, queue.unique_retention
        )


def batches(
    open_backend: Callable[[], Backend],
    fifo_dir: Callable[[], str],
    queue: str,
    items: Iterable[tuple[str, bytes]],
    options: Options,
) -> Iterator[list[int | None]]:
    """Store ``(label, payload)`` items in batches, yielding each batch's ids once
    committed. At the first rejected item, what came before it is committed and
    yielded, then InputRejected names the item; when a batch cannot be stored, its
    error is raised. Either error then says what the whole command stored (how
    many, their ids) and from which item on nothing was (:class:`Progress`).
    ``fifo_dir``: the database's
    directory of this host's wake-up FIFOs (``slots.database_dir``)."""
    o = options
    check_options(o.priority, o.unique_key, o.delay)
    backend = open_backend()
    batch: list[bytes] = []
    first = last = ""  # the labels of the batch's first and last items
    size = 0
    done = Progress()
    check = payloads.checker(o.fmt)
    fits = backend.payload_fits

    def store(batch: list[bytes], first: str, last: str) -> list[int | None]:
        try:
            ids = backend.enqueue(
                queue, batch, delay=o.delay, priority=o.priority, unique_key=o.unique_key,
                wake=o.wake,
            )  # fmt: skip
        except MqError as exc:
            advice = f"\n{retry_advice(queue, o)}" if isinstance(exc, CommitUnknown) else ""
            exc.args = (f"{exc}{advice}\n{done.failed_at(first, last, exc)}",)
            raise
        if not o.delay and any(i is not None for i in ids):
            # Committed and ready: drains waiting on this host start it now.
            wakeup.notify(fifo_dir(), queue)
        done.add(ids)
        return ids

    try:
        for label, data in items:
            if not fits(data):
                raise PayloadTooLarge(
                    f"{label} is {len(data)} bytes, more than the database accepts "
                    f"in one message ({backend.max_payload} bytes)"
                )
            if o.validate:
                try:
                    check(data)
                except ValueError as exc:
                    raise InputRejected(f"{label}: {exc} (queue {queue!r} is {o.fmt})") from None
            first, last = (first if batch else label), label
            batch.append(data)
            size += len(data)
            if len(batch) >= BATCH_MESSAGES or size >= BATCH_BYTES:
                yield store(batch, first, last)
                batch, size = [], 0
    except InputRejected as exc:
        if batch:
            yield store(batch, first, last)
        raise type(exc)(f"{exc}\n{done.rejected()}") from None
    if batch:
        yield store(batch, first, last)


def collect(stream: Iterable[list[int | None]]) -> list[int | None]:
    """Every batch's ids, in order (``MQ.enqueue_many``). An error that stops the
    stream part way carries the ids stored before it as ``stored_ids``."""
    ids: list[int | None] = []
    try:
        for batch in stream:
            ids.extend(batch)
    except MqError as exc:
        exc.stored_ids = [i for i in ids if i is not None]
        raise
    return ids


def retry_advice(queue: str, o: Options) -> str:
    """What to do after CommitUnknown: the batch's rows are not there (never stored,
    or stored and run already). A keyed retry is safe only where a run message's
    key outlives it (unique_retention); with the default 0 it would store again."""
    if o.unique_key is not None and o.unique_retention > 0:
        return (
            "enqueue again with the same unique key within "
            f"{format_duration(o.unique_retention)} (the unique_retention of queue {queue!r}): "
            "a message that was stored is then skipped, even if a drain has run it"
        )
    kept = format_duration(o.unique_retention) if o.unique_retention else "0"
    return (
        f"look (`mq list -q {queue}`) before enqueueing again: if it is not there, it was "
        "either never stored or stored and run already, and a retry may run it twice. "
        "A unique key makes such a retry safe only on a queue whose unique_retention "
        f"keeps keys after the run (it is {kept} here)"
    )


class Progress:
    """What an enqueue stored so far, in bounded memory (a stream may be any length):
    the count, and the ids as runs up to RUNS of them, then only their bounds; and the
    sentences that say so when the enqueue stops."""

    #: more runs of ids than this are said as their count and bounds
    RUNS = 4

    def __init__(self) -> None:
        self.count = 0
        self.skipped = 0  # unique key taken
        self.runs: list[list[int]] = []  # [low, high], the first RUNS of them
        self.run_count = 0
        self.low = self.high = self.last = 0

    def add(self, ids: list[int | None]) -> None:
        new = sorted(i for i in ids if i is not None)
        self.skipped += len(ids) - len(new)
        for i in new:
            if self.count and i == self.last + 1:  # the run goes on
                if self.run_count <= self.RUNS:
                    self.runs[-1][1] = i
            else:
                self.run_count += 1
                if self.run_count <= self.RUNS:
                    self.runs.append([i, i])
            self.low = min(self.low, i) if self.count else i
            self.high = max(self.high, i)
            self.count += 1
            self.last = i

    def rejected(self) -> str:
        """At a rejected item: it and what follows were not stored."""
        if not self.count and not self.skipped:
            return "nothing was stored"
        return (
            f"the {self._stored()} before it were stored, {self._which()}; "
            "it and everything after it were not stored"
        )

    def failed_at(self, first: str, last: str, error: MqError) -> str:
        """The batch of items ``first`` to ``last`` could not be stored (``error``)."""
        before = bool(self.count or self.skipped)
        head = f"{self._stored()} before {first} were stored, {self._which()}"
        if isinstance(error, CommitUnknown):  # that batch is in doubt, not the rest
            span = first if first == last else f"{first} to {last}"
            doubt = f"{span} may have been stored (above); everything after {last} was not stored"
            return f"{head}; {doubt}" if before else doubt
        if not before:
            return "nothing was stored"
        return f"{head}; {first} and everything after it were not stored"

    def _stored(self) -> str:
        skipped = f", {self.skipped} skipped (unique key taken)" if self.skipped else ""
        return f"{self.count} message(s){skipped}"

    def _which(self) -> str:
        """The ids, as runs (``1-1000, 2001-2500``), or their bounds and how many runs."""
        if not self.count:
            return "no ids"
        if self.run_count > self.RUNS:
            return f"ids {self.low} to {self.high} in {self.run_count} runs (`mq list` shows which)"
        return "ids " + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in self.runs)
