"""A queue's failed messages grouped by error, for the console's failures page.

The grouping runs in SQL (``Backend.failure_groups``, GROUP BY over the first
:data:`SAMPLE` failed messages in the claim index's order), so a queue with a
million failed messages costs one bounded query and loads no row into Python.
A group's key is the exception's class, or the error's last line: see
failure_groups in <dialect>/<dialect>.sql for the exact rule.

Each group's key is the text the console hands to the queue page's error filter
(a case-insensitive substring of last_error) to retry or delete the group. That
filter selects exactly the group only when no other failed message holds the
key, so the same query counts, for each key, the messages of the sample that
hold it anywhere: a group is :attr:`Group.exact` when that count is its own
count, and the console offers its actions only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mq_cli.backends.base import Backend
from mq_cli.core.config import Config, validate_queue_name
from mq_cli.core.models import QueueStats, iso

#: failed messages grouped at most (the oldest failures, by priority)
SAMPLE = 50_000
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
        """Whether the error filter ``error`` selects this group and nothing else."""
        return bool(self.error.strip()) and self.matching == self.count

    def to_json(self) -> dict[str, object]:
        return {
            "error": self.error, "count": self.count, "oldest": iso(self.oldest),
            "newest": iso(self.newest), "sample_id": self.sample_id,
            "matching": self.matching, "exact": self.exact,
        }  # fmt: skip


@dataclass(frozen=True)
class Failures:
    queue: str
    failed: int  # failed messages in the queue
    looked_at: int  # of them, grouped
    groups: list[Group]

    @property
    def complete(self) -> bool:
        """Whether every failed message of the queue was grouped."""
        return self.looked_at >= self.failed

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue, "failed": self.failed, "looked_at": self.looked_at,
            "complete": self.complete, "groups": [g.to_json() for g in self.groups],
        }  # fmt: skip


def groups(config: Config, backend: Backend, queue: str, sample: int = SAMPLE) -> Failures:
    """``queue``'s failed messages by error, the biggest group first."""
    validate_queue_name(queue)
    rows = backend.failure_groups(queue, sample, GROUPS)
    found = [Group(*row[:6]) for row in rows]
    looked_at = rows[0][6] if rows else 0
    failed = looked_at
    if looked_at >= sample:  # more may be failed than were grouped: count them

        def stalled_after(name: str) -> float:
            return config.queue(name).stalled_after

        counted = backend.stats(queue, stalled_after).get(queue, QueueStats()).failed
        failed = max(counted, looked_at)
    return Failures(queue, failed, looked_at, found)
