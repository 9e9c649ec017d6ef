"""A queue's messages a page at a time, for the console: by state, error text and unique key.

Pages are keyset pages (``id > after``, by id, on the queue's index), so page 5,000
of a million-row table costs what page 1 does; a unique key is looked up on the
unique index. The text filters run on the rows
the index returns, with a budget of rows looked at per page (:data:`SCAN`): a
filter that matches nothing in a million rows answers "none up to id N, go on"
in bounded time instead of reading the whole table in one request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq_cli.backends.base import OPERATE_BATCH, Backend
from mq_cli.core.config import Config, validate_queue_name
from mq_cli.core.errors import ConfigError
from mq_cli.core.models import STATE_STATUS, Message, message_state
from mq_cli.core.states import State, Stored
from mq_cli.ops.operate import activities

#: rows looked at for one page at most, whatever the filter
SCAN = 5_000


@dataclass(frozen=True)
class Filter:
    """Which messages: a state (one of STATES), text within last_error, a unique key."""

    state: State | None = None
    error: str | None = None  # a substring of last_error, case-insensitive
    unique_key: str | None = None  # the exact key

    def __post_init__(self) -> None:
        if self.state is not None:  # a caller without mypy may give a string: checked here
            object.__setattr__(self, "state", State.parse(self.state, "state"))

    def matches(self, message: Message, state: State) -> bool:
        if self.state is not None and state != self.state:
            return False
        if self.unique_key is not None and message.unique_key != self.unique_key:
            return False
        if self.error is not None:
            return self.error.lower() in (message.last_error or "").lower()
        return True


@dataclass
class Page:
    messages: list[Message]
    states: dict[int, State]
    activity: dict[int, tuple[str, float | None]] = field(default_factory=dict)
    #: where the next page starts (the last id looked at); None: nothing after it
    next_after: int | None = None
    scanned: int = 0  # rows looked at


def browse(
    config: Config,
    backend: Backend,
    queue: str,
    chosen: Filter,
    after: int = 0,
    limit: int = 50,
    scan: int = SCAN,
) -> Page:
    """Up to ``limit`` messages of ``queue`` matching ``chosen`` with id > ``after``."""
    validate_queue_name(queue)
    if limit < 1:
        raise ConfigError("the limit must be at least 1")
    status: State | Stored | None = chosen.state
    if chosen.state is not None and chosen.state != State.DELAYED:
        status = STATE_STATUS.get(chosen.state, chosen.state)
    # a delayed filter reads stored 'delayed' rows (a due one is ready: left out below)
    stalled_after = config.queue(queue).stalled_after
    now = backend.now()
    found: list[Message] = []
    states: dict[int, State] = {}
    scanned = 0
    cursor = after
    exhausted = False
    wanted = limit  # rows to read next when not all match: grows while few of them do
    while len(found) < limit and scanned < scan:
        if _exact(chosen):
            size = min(OPERATE_BATCH, max(limit - len(found), 1))
        else:  # a dense state's page reads little more than it shows
            size = min(wanted, OPERATE_BATCH, scan - scanned)
            wanted *= 4
        if chosen.unique_key is not None:  # one message at most: the unique index has it
            rows = [m for m in backend.list_key(queue, chosen.unique_key) if m.id > cursor]
            size = len(rows) + 1  # and nothing after it
        else:
            rows = backend.list_messages(queue, status, cursor, size)
        if not rows:
            exhausted = True
            break
        dead = backend.dead_owners([m.owner for m in rows if m.status == Stored.PROCESSING])
        for m in rows:
            scanned += 1
            cursor = m.id
            state = message_state(
                m.status, m.available_at, m.heartbeat_at, m.owner in dead, now, stalled_after
            )
            if chosen.matches(m, state):
                found.append(m)
                states[m.id] = state
                if len(found) >= limit:
                    break
        if len(rows) < size and len(found) < limit:
            exhausted = True
            break
    if exhausted:
        next_after = None
    elif len(found) >= limit:
        next_after = found[-1].id
    else:
        next_after = cursor
    live = [m for m in found if states[m.id] == State.PROCESSING]
    return Page(found, states, activities(backend, live, now), next_after, scanned)


def _exact(chosen: Filter) -> bool:
    """Whether every row the index returns matches (so a page needs no more rows than it shows)."""
    return chosen.state in (None, State.FAILED) and not chosen.error and not chosen.unique_key
