"""Producing: the checks an enqueue's options get, and the batches a stream of
payloads is stored in (``MQ.enqueue_stream``, ``MQ.enqueue_many``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from mq_cli.backends.base import Backend
from mq_cli.core import payloads
from mq_cli.core.durations import parse_duration
from mq_cli.core.errors import ConfigError, InputRejected, PayloadTooLarge
from mq_cli.drain import wakeup

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


def batches(
    open_backend: Callable[[], Backend],
    fifo_dir: Callable[[], str],
    queue: str,
    items: Iterable[tuple[str, bytes]],
    options: Options,
) -> Iterator[list[int | None]]:
    """Store ``(label, payload)`` items in batches, yielding each batch's ids once
    committed; at the first rejected item, what came before it is committed and
    yielded, then InputRejected names the item. ``fifo_dir``: the database's
    directory of this host's wake-up FIFOs (``slots.database_dir``)."""
    o = options
    check_options(o.priority, o.unique_key, o.delay)
    backend = open_backend()
    batch: list[bytes] = []
    size = 0
    stored = 0
    check = payloads.checker(o.fmt)
    fits = backend.payload_fits

    def store(batch: list[bytes]) -> list[int | None]:
        ids = backend.enqueue(
            queue, batch, delay=o.delay, priority=o.priority, unique_key=o.unique_key, wake=o.wake
        )
        if not o.delay and any(i is not None for i in ids):
            # Committed and ready: drains waiting on this host start it now.
            wakeup.notify(fifo_dir(), queue)
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
            batch.append(data)
            size += len(data)
            if len(batch) >= BATCH_MESSAGES or size >= BATCH_BYTES:
                yield store(batch)
                stored += len(batch)
                batch, size = [], 0
    except InputRejected as exc:
        if batch:
            yield store(batch)
            stored += len(batch)
        raise type(exc)(f"{exc}\n{_stored_note(stored)}") from None
    if batch:
        yield store(batch)


def _stored_note(count: int) -> str:
    if count == 0:
        return "nothing was stored"
    return (
        f"the {count} message(s) before it were stored (their ids are printed); "
        "it and everything after it were not"
    )
