"""The interface every backend implements, and the loader for its named SQL blocks."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources

from ..models import Message, QueueStats


def placeholders(count: int, mark: str) -> str:
    """``%s, %s, %s`` for an IN list of ``count`` bound values."""
    return ", ".join([mark] * count)


SCHEMA_VERSION = 1
_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The ``-- name: x`` blocks of ``sql/<dialect>.sql`` as {name: statement}."""
    text = (
        resources.files(__package__).joinpath("sql").joinpath(f"{dialect}.sql").read_text("utf-8")
    )
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


class Backend(ABC):
    """One open connection to a queue table, with every operation mq needs.

    Each method is its own short transaction and commits before it returns,
    so no transaction stays open while a handler runs.
    """

    kind: str
    table: str
    #: the largest payload this database takes in one statement
    max_payload: int

    def payload_fits(self, payload: bytes) -> bool:
        """Whether one message of this size can be stored."""
        return len(payload) <= self.max_payload

    @abstractmethod
    def ddl(self) -> list[str]:
        """The statements `mq init` runs (and `--print-sql` prints)."""

    @abstractmethod
    def init_schema(self) -> None:
        """Create the table(s) if missing; idempotent."""

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
    ) -> list[int | None]:
        """Store the payloads in one transaction; ids in order, None where skipped."""

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
    def ack_success(self, message: Message, owner: str, retention: float = 0.0) -> bool:
        """Delete a succeeded message (or keep a tombstone of its unique key for
        ``retention`` seconds). False when ``owner`` no longer holds it."""

    @abstractmethod
    def ack_success_many(self, ids: Sequence[int], owner: str) -> int:
        """Delete several succeeded messages in one statement; how many were still ours."""

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
    def purge_tombstones(self, queue: str) -> int:
        """Delete expired unique-key tombstones (a bounded number per call)."""

    @abstractmethod
    def explain_claim(self, queue: str, limit: int) -> list[str]:
        """The database's plan for the claim query, one line per row."""

    def reconnect(self) -> None:  # noqa: B027 - SQLite has nothing to reconnect
        """Open a fresh connection after a lost one (only MySQL connections get lost)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Backend", "Message", "QueueStats", "SCHEMA_VERSION", "load_queries", "placeholders"]
