"""Plain data the API returns: messages, counts and reports."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

from mq_cli.core.states import STATE_STATUS, STATES, STATUSES, Action, State, Stored

# what `mq stats` counts and `mq list --status` takes (core/states.py): ready splits
# into ready now and delayed, processing into live claims and stalled ones
__all__ = ["STATES", "STATE_STATUS", "STATUSES"]


def message_state(
    status: str,
    available_at: datetime,
    heartbeat_at: datetime | None,
    owner_dead: bool,
    now: datetime,
    stalled_after: float,
) -> State:
    """One of STATES: what every view calls a message (stats counts the same in SQL).

    Ready splits into ready now and delayed (a retry's backoff, --delay);
    processing into a live claim and a stalled one (no heartbeat for
    ``stalled_after``, or its drain is gone: its lock is free).
    """
    if status == Stored.READY:
        return State.DELAYED if available_at > now else State.READY
    if status == Stored.PROCESSING:
        old = heartbeat_at is not None and (now - heartbeat_at).total_seconds() > stalled_after
        return State.STALLED if old or owner_dead else State.PROCESSING
    return State(status)


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a Z, as every --json output writes times."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Message:
    id: int
    queue: str
    status: str
    priority: int
    error_count: int
    created_at: datetime
    available_at: datetime
    payload: bytes | None = None
    unique_key: str | None = None
    last_error: str | None = None
    owner: str | None = None
    heartbeat_at: datetime | None = None

    def to_json(self, with_payload: bool = False) -> dict[str, object]:
        """The --json form (`list`, `gc`, `show`, notify callbacks): times ISO 8601 UTC;
        the payload only ``with_payload``, as text if it is UTF-8, else base64."""
        data: dict[str, object] = {
            "id": self.id,
            "queue": self.queue,
            "status": self.status,
            "priority": self.priority,
            "error_count": self.error_count,
            "created_at": iso(self.created_at),
            "available_at": iso(self.available_at),
            "unique_key": self.unique_key,
            "owner": self.owner,
            "heartbeat_at": iso(self.heartbeat_at),
            "last_error": self.last_error,
        }
        if with_payload:
            payload = self.payload or b""
            try:
                data["payload"] = payload.decode("utf-8")
            except UnicodeDecodeError:
                import base64

                data["payload"] = base64.b64encode(payload).decode("ascii")
                data["payload_encoding"] = "base64"
        return data


def claimed_message(
    id: int,
    queue: str,
    priority: int,
    error_count: int,
    created_at: datetime,
    available_at: datetime,
    unique_key: str | None,
    payload: bytes,
    owner: str,
) -> Message:
    """A Message just claimed (processing, no error, no heartbeat yet), as
    ``Message(...)`` makes it but without a frozen dataclass's ``__init__``: a
    claim makes one per message, and that ``__init__`` took 2.6 µs of it (0.8 now)."""
    message = _new(Message)
    message.__dict__.update(
        id=id,
        queue=queue,
        status=Stored.PROCESSING,
        priority=priority,
        error_count=error_count,
        created_at=created_at,
        available_at=available_at,
        payload=payload,
        unique_key=unique_key,
        last_error=None,
        owner=owner,
        heartbeat_at=None,
    )
    return message


_new = object.__new__


@dataclass
class QueueStats:
    ready: int = 0
    delayed: int = 0
    processing: int = 0
    stalled: int = 0
    failed: int = 0
    oldest_ready_seconds: float | None = None
    paused: bool = False  # `mq pause`: drains skip it on every host
    #: the counts that are estimates (the console's, above a bound: backends/counts.py);
    #: in the JSON only when there is one, so exact counts read as `mq stats --json`
    estimated: tuple[str, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {state.value: getattr(self, state.value) for state in STATES}
        found |= {
            "oldest_ready_seconds": (
                None if self.oldest_ready_seconds is None else round(self.oldest_ready_seconds, 3)
            ),
            "paused": self.paused,
        }
        if self.estimated:
            found["estimated"] = list(self.estimated)
        return found


@dataclass(frozen=True)
class ListedMessage:
    """One message of a :class:`Listing`, as `mq list --json` prints it."""

    message: Message
    #: what every view calls it now: one of STATES
    state: State
    #: for a message a live drain holds: "running" (its handler runs) or "waiting"
    #: (in that drain's batch); None otherwise
    activity: str | None = None
    #: how long its handler has run, once it has run a second; else None
    running_seconds: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            **self.message.to_json(),
            "state": self.state,
            "activity": self.activity,
            "running_seconds": self.running_seconds,
        }


@dataclass
class Listing:
    """A page of messages as `mq list` shows them, with the database's clock for ages.

    Iterate it for each message with its state (:class:`ListedMessage`), oldest first::

        for item in mq.list_messages("mail", "failed"):
            print(item.message.id, item.state, item.message.last_error)
    """

    queue: str
    now: datetime
    messages: list[Message]
    more: bool = False  # more messages matched than the limit allowed
    stalled_after: float = 3600.0  # the queue's, to tell stalled from live claims
    states: dict[int, State] = field(default_factory=dict)  # id -> one of STATES
    #: processing messages of live drains: id -> ("running", seconds) or ("waiting", None)
    activity: dict[int, tuple[str, float | None]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[ListedMessage]:
        for m in self.messages:
            activity, seconds = self.activity.get(m.id, (None, None))
            yield ListedMessage(m, self.states.get(m.id) or State(m.status), activity, seconds)

    def __len__(self) -> int:
        return len(self.messages)

    def to_json(self) -> list[dict[str, object]]:
        """`mq list --json`: each message's fields with its state and activity."""
        return [item.to_json() for item in self]


def listed_json(
    message: Message, state: State, activity: tuple[str, float | None] | None
) -> dict[str, object]:
    """One message as `mq list --json` prints it."""
    doing, seconds = activity or (None, None)
    return ListedMessage(message, state, doing, seconds).to_json()


@dataclass
class ByIdResult:
    """What `retry` / `delete` did with the ids they were given."""

    done: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)  # processing: id -> owner
    missing: list[int] = field(default_factory=list)  # no such message (or a tombstone)


@dataclass
class GcQueueResult:
    """What `gc` found and did in one queue."""

    queue: str
    matched: int = 0
    changed: int = 0  # requeued or deleted
    now_failed: int = 0  # stalled messages requeued into `failed` (max_errors reached)
    notify_error: str | None = None  # the callback failed: nothing was changed


@dataclass
class GcReport:
    kind: State  # GC_KINDS: stalled or failed
    action: Action | None  # None (list only), or one of GC_ACTIONS: requeue or delete
    queues: list[GcQueueResult] = field(default_factory=list)

    @property
    def matched(self) -> int:
        return sum(q.matched for q in self.queues)

    @property
    def notify_failed(self) -> bool:
        return any(q.notify_error for q in self.queues)


@dataclass(frozen=True)
class Run:
    """One drain run as the run log holds it (times: Unix seconds, the database's clock)."""

    id: int
    owner: str
    host: str
    pid: int
    queues: tuple[str, ...]
    queue: str | None  # the queue it works on now (or last)
    started_at: float
    seen_at: float
    ended_at: float | None
    claimed: int
    succeeded: int
    failed: int
    returned: int
    exit_code: int | None
    running_id: int | None
    running_since: float | None
    #: an operator's request to it (`mq stop`): "stop" or "quiet", who asked and when
    stop_request: Action | None = None
    stop_by: str | None = None
    stop_at: float | None = None
    #: why it ended, the words of `mq drain --json`'s "ended" ("stop", "quiet": asked to)
    end_reason: str | None = None


@dataclass(frozen=True)
class Slice:
    """One run's results on one queue over a stretch of time (the run log's rollup)."""

    queue: str
    start: float
    end: float
    done: int
    failed: int
    wait_sum: float
    duration_sum: float
    wait_hist: str
    duration_hist: str
