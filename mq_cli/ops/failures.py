"""A queue's failed messages grouped by error, for the console's failures page.

The grouping runs in SQL (``Backend.failure_groups``, GROUP BY over the first
:data:`SAMPLE` failed messages in the claim index's order), so a queue with a
million failed messages costs two bounded queries and loads no row into Python.
A group's key is the exception's class, or the error's last line: see
failure_groups in <dialect>/<dialect>.sql for the exact rule.

Each group's key is the text the console hands to the queue page's error filter
(a case-insensitive substring of last_error) to retry or delete the group. That
filter selects exactly the group only when no other failed message holds the
key, so a second query counts, for each key, the messages of the same sample
that hold it anywhere (``Backend.failure_matches``): a group is :attr:`Group.exact` when that count is its own
count, and the console offers its actions only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mq_cli.backends.base import Backend
from mq_cli.core.config import validate_queue_name
from mq_cli.core.models import iso
from mq_cli.core.states import State

#: failed messages grouped at most (the oldest failures, by priority): one query
#: over this many rows stays within the console's page time at any queue size
SAMPLE = 5_000
#: groups shown at most, the biggest first
GROUPS = 50


@dataclass(frozen=True)
class Group:
    error: str  # the key: the error filter that selects it
    count: int
    oldest: datetime  # its oldest failure
    newest: datetime
    sample_id: int  # its newest message
    matching: int  # failed messages of the sample whose last_error holds the key

    @property
    def exact(self) -> bool:
        """Whether the error filter ``error`` selects this group and nothing else.

        Not for a key with a non-ASCII letter that has a case: SQLite's lower()
        folds ASCII only (PostgreSQL's, under the C locale, too), while the filter
        folds with Python's str.lower(), so the database's count cannot vouch for it."""
        cased = any(not c.isascii() and c.lower() != c.upper() for c in self.error)
        return bool(self.error.strip()) and self.matching == self.count and not cased

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error, "count": self.count, "oldest": iso(self.oldest),
            "newest": iso(self.newest), "sample_id": self.sample_id,
            "matching": self.matching, "exact": self.exact,
        }  # fmt: skip


@dataclass(frozen=True)
class Failures:
    queue: str
    looked_at: int  # failed messages grouped
    complete: bool  # every failed message of the queue was grouped
    groups: list[Group]

    @property
    def failed(self) -> int | None:
        """The queue's failed messages; None when there are more than were grouped
        (counting them all is the overview's job, not a bounded page's)."""
        return self.looked_at if self.complete else None

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue, State.FAILED: self.failed, "looked_at": self.looked_at,
            "complete": self.complete, "groups": [g.to_json() for g in self.groups],
        }  # fmt: skip


def groups(backend: Backend, queue: str, sample: int = SAMPLE) -> Failures:
    """``queue``'s failed messages by error, the biggest group first."""
    validate_queue_name(queue)
    rows = backend.failure_groups(queue, sample, GROUPS)
    # a second read of the same sample (the claim index's order is fixed): a
    # message that failed or was retried in between may make a count off by one
    held = backend.failure_matches(queue, sample, [row[1] for row in rows])
    found = [
        Group(key, count, oldest, newest, ident, matching)
        for (key, _, count, oldest, newest, ident, _), matching in zip(rows, held, strict=True)
    ]
    looked_at = rows[0][6] if rows else 0
    return Failures(queue, looked_at, looked_at < sample, found)
