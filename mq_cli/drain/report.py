"""What a drain is asked to do and what it reports (plain data, no machinery)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrainOptions:
    queues: list[str] = field(default_factory=list)  # empty: every configured queue
    handler: str | None = None
    max_messages: int | None = None
    max_seconds: float | None = None
    batch_size: int | None = None
    concurrency: int | None = None
    wait: bool = False
    #: called with the report after each message's result, and at least once a second
    #: while a handler runs or the drain waits (a terminal's status line); must be cheap
    progress: Callable[[DrainReport], None] | None = None


@dataclass
class Activity:
    """What the drain does at this moment, for a terminal's status line (not in --json)."""

    queue: str = ""
    running: int | None = None  # the message whose handler runs, as far as the drain knows
    waiting: bool = False  # --wait with nothing to do: polling, or woken by an enqueue
    since: float = 0.0  # time.monotonic() when that began

    def run(self, message_id: int | None) -> None:
        self.running, self.waiting, self.since = message_id, False, time.monotonic()

    def wait(self) -> None:
        if not self.waiting:
            self.running, self.waiting, self.since = None, True, time.monotonic()


@dataclass
class DrainReport:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0  # handler failures (retried later or now `failed`)
    returned: int = 0  # claimed, never started, put back to ready
    lost: int = 0  # of succeeded + failed: acknowledgements refused, no longer ours
    #: ran, or was running when the drain stopped it (its fence, a database failure
    #: mid-batch), and no result was recorded: it stays processing for gc
    unrecorded: int = 0
    #: the ids of messages this drain stopped holding without recording a result or
    #: giving them back (the database away, its fence, a second signal): they may stay
    #: processing until `mq gc --stalled --requeue` (or requeue_stalled) takes them back
    for_gc: list[int] = field(default_factory=list)
    seconds: float = 0.0
    queues: list[str] = field(default_factory=list)  # queues worked on
    busy: list[str] = field(default_factory=list)  # queues whose slots were all taken
    paused: list[str] = field(default_factory=list)  # queues skipped: `mq pause`
    #: why the run ended: "empty" (nothing left to do), "deadline" (--max-seconds),
    #: "max_messages", "signal" (SIGTERM/SIGINT), "database" (it went away or refused;
    #: exit 3), "error" (another error, e.g. a handler that does not import: exit 2),
    #: "stop" or "quiet" (`mq stop`, drain/requests.py)
    ended: str = "empty"
    activity: Activity = field(default_factory=Activity, compare=False, repr=False)

    @property
    def left(self) -> int:
        """Claimed, not known to have started, and not given back (the database was
        away, or gc took it while the drain was stopped): processing, for gc. Every
        claimed message is in one of succeeded, failed, returned, unrecorded, left."""
        return self.claimed - self.succeeded - self.failed - self.returned - self.unrecorded

    def to_json(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "returned": self.returned,
            "unrecorded": self.unrecorded,
            "left": self.left,
            "lost": self.lost,
            "for_gc": self.for_gc,
            "seconds": round(self.seconds, 3),
            "queues": self.queues,
            "busy": self.busy,
            "paused": self.paused,
            "ended": self.ended,
        }
