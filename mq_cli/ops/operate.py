"""What operators do to messages: gc of stalled and failed ones, list, show, retry, delete, purge.

No click and no SQL: these functions drive the backend's operator methods in
bounded batches (``OPERATE_BATCH`` ids per statement, each its own short
transaction, so clearing a million rows never holds a long lock) and return
plain results for the CLI to render.

Every change repeats its match in the statement itself: a message that
finished, heartbeated again or was claimed again between being found and being
changed is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TypeVar

from mq_cli.backends.base import OPERATE_BATCH, Backend
from mq_cli.backends.liveness import mark_dead
from mq_cli.core.config import Config, QueueConfig, validate_queue_name
from mq_cli.core.errors import ConfigError, MqError, NotFound
from mq_cli.core.models import (
    STATE_STATUS,
    STATES,
    STATUSES,
    ByIdResult,
    GcQueueResult,
    GcReport,
    Listing,
    Message,
    message_state,
)
from mq_cli.core.states import BY_ID, GC_ACTIONS, GC_KINDS, Action, State, Stored
from mq_cli.host import clock
from mq_cli.host.recovery import (
    act_as_found,
    call_back,
    change,
    clock_says_wait,
    find,
)
from mq_cli.runners import paths as handler_paths

#: gc kind -> the status it looks in
KINDS = {kind: STATE_STATUS.get(kind, Stored.FAILED) for kind in GC_KINDS}
CALLBACK_KEYS = {kind: f"on_{kind}" for kind in GC_KINDS}

log = logging.getLogger("mq")
OnBatch = Callable[[list[Message]], None]
T = TypeVar("T")


def _chunks(items: Sequence[T], size: int = OPERATE_BATCH) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- gc ---------------------------------------------------------------------------


class Gc:
    """One `mq gc` run: find the stalled or failed messages, notify, requeue or delete."""

    def __init__(
        self,
        config: Config,
        backend: Backend,
        kind: State | str,
        *,
        queues: Sequence[str] = (),
        older_than: float | None = None,
        action: Action | str | None = None,
        notify: bool = False,
        on_batch: OnBatch | None = None,
    ):
        if kind not in KINDS:
            raise ConfigError(f"gc looks for {' or '.join(KINDS)} messages, not {kind!r}")
        if action is not None and action not in GC_ACTIONS:
            raise ConfigError(f"gc can {' or '.join(GC_ACTIONS)}, not {action!r}")
        if older_than is not None and kind != State.STALLED:
            raise ConfigError("--older-than applies to stalled messages only")
        self.config = config
        self.backend = backend
        self.kind = State(kind)
        self.queues = [validate_queue_name(q) for q in dict.fromkeys(queues)]
        self.older_than = older_than
        self.action = None if action is None else Action(action)
        self.notify = notify
        # Sees each batch as it goes: the matches when listing, the messages
        # changed (as they were found) when requeuing or deleting.
        self.on_batch = on_batch
        if notify:
            self._check_callbacks()

    def _check_callbacks(self) -> None:
        """Every callback --notify may call, checked before anything is changed (exit 2)."""
        key = CALLBACK_KEYS[self.kind]
        named = {q: getattr(self.config.queue(q), key) for q in self.queues}
        for queue, path in named.items():
            if not path:
                raise ConfigError(
                    f"--notify: queue {queue!r} has no {key} callback; set queues.{queue}.{key} "
                    f"or defaults.{key} in the config"
                )
        every = [self.config.defaults, *self.config.queues.values()]
        paths = set(named.values()) if named else {getattr(q, key) for q in every} - {None}
        if not paths:
            raise ConfigError(
                f"--notify: no {key} callback is configured; set defaults.{key} "
                "(or a queue's) in the config"
            )
        for path in sorted(paths):
            handler_paths.resolve(path)

    def run(self) -> GcReport:
        report = GcReport(self.kind, self.action)
        # Before anything is called stalled: was the database's clock stepped?
        state = clock.observe_quietly(self.backend) if self.kind == State.STALLED else None
        names = self.queues or self.backend.queues_with_status(KINDS[self.kind])
        for name in names:
            queue = self.config.queue(name)
            bound = self.older_than if self.older_than is not None else queue.stalled_after
            result = GcQueueResult(name)
            report.queues.append(result)
            if self.kind == State.STALLED and self.action is not None:
                mark_dead(self.backend, name)  # a write: only when we act on them
            if clock_says_wait(state, name, bound):
                continue
            if self.action is None or self.notify:
                self._list_then_act(queue, bound, result)
            else:
                act_as_found(
                    self.backend, self.kind, self.action, queue, bound, result, self.on_batch
                )
        return report

    def _list_then_act(self, queue: QueueConfig, bound: float, result: GcQueueResult) -> None:
        matched: list[Message] = []
        after = 0
        while page := self._find(queue.name, bound, after):
            result.matched += len(page)
            after = page[-1].id
            if self.action is None and self.on_batch is not None:
                self.on_batch(page)
            if self.notify:
                matched += page
        if not matched:
            return
        result.notify_error = self._call(queue, matched)
        if result.notify_error is None and self.action is not None:
            for batch in _chunks(matched):
                changed = change(self.backend, self.kind, self.action, queue, bound, batch, result)
                if self.on_batch is not None and changed:
                    self.on_batch(changed)

    def _find(self, name: str, bound: float, after: int) -> list[Message]:
        if self.action is not None or self.kind != State.STALLED:
            return find(self.backend, self.kind, name, bound, after)
        # Only looking: a dead drain's messages are told by its free lock, as `mq list`
        # tells them, not marked (mark_dead writes).
        while page := self.backend.list_messages(name, State.PROCESSING, after, OPERATE_BATCH):
            now = self.backend.now()
            dead = self.backend.dead_owners([m.owner for m in page])
            stalled = [m for m in page if _state(m, now, bound, dead) == State.STALLED]
            if stalled:
                return stalled
            after = page[-1].id
        return []

    def _call(self, queue: QueueConfig, messages: list[Message]) -> str | None:
        """Run the queue's callback once with all its matches; the error if it failed."""
        key = CALLBACK_KEYS[self.kind]
        path = getattr(queue, key)  # the queue's own, else the defaults'
        if not path:
            return f"no {key} callback is configured for it (set defaults.{key})"
        return call_back(path, queue, messages, self.config.database.secret_env())


# -- list, show -------------------------------------------------------------------


def list_messages(
    config: Config,
    backend: Backend,
    queue: str | None,
    state: State | str | None = None,
    limit: int = 100,
) -> Listing:
    """The oldest ``limit`` live messages of ``queue`` (by id; None: of every queue, a
    queue after another), in ``state`` (one of STATES) if given."""
    if queue is not None:
        validate_queue_name(queue)
    if state is not None and state not in STATES:
        raise ConfigError(f"status must be one of {', '.join(STATES)}, not {state!r}")
    if limit < 1:
        raise ConfigError("the limit must be at least 1")
    chosen = None if state is None else State(state)
    status = None if chosen is None else STATE_STATUS.get(chosen, chosen)
    now = backend.now()
    if queue is not None:
        names = [queue]
    else:
        found_in = {q for s in STATUSES for q in backend.queues_with_status(s)}
        names = sorted(found_in)
    found: list[Message] = []
    states: dict[int, State] = {}
    for name in names:
        stalled_after = config.queue(name).stalled_after
        after = 0
        while len(found) <= limit:
            size = OPERATE_BATCH if chosen else min(OPERATE_BATCH, limit + 1)
            page = backend.list_messages(name, status, after, size)
            if not page:
                break
            after = page[-1].id
            dead = backend.dead_owners([m.owner for m in page if m.status == Stored.PROCESSING])
            for m in page:
                states[m.id] = _state(m, now, stalled_after, dead)
                if chosen is None or states[m.id] == chosen:
                    found.append(m)
    stalled_after = config.queue(queue).stalled_after if queue else 0.0
    kept = found[:limit]
    live = [m for m in kept if states[m.id] == State.PROCESSING]
    return Listing(
        queue or "",
        now,
        kept,
        len(found) > limit,
        stalled_after,
        {m.id: states[m.id] for m in kept},
        activities(backend, live, now),
    )


def activities(
    backend: Backend, messages: Sequence[Message], now: datetime
) -> dict[int, tuple[str, float | None]]:
    """Which of these held messages runs now (and for how long) and which waits in
    its drain's batch, as the run log tells: a message shows as running once it
    has run for a second (runlog.RUNNING_AFTER); until then, and where the run log
    is missing, it is neither."""
    from mq_cli.host.runlog import LIVE_WITHIN

    if not messages:
        return {}
    moment = now.timestamp()
    try:
        runs = {r.owner: r for r in backend.runs_live(moment - LIVE_WITHIN)}
    except MqError:
        return {}
    found: dict[int, tuple[str, float | None]] = {}
    for m in messages:
        run = runs.get(m.owner or "")
        if run is None or run.ended_at is not None or run.running_id is None:
            continue
        if run.running_id == m.id and run.running_since is not None:
            found[m.id] = ("running", max(moment - run.running_since, 0.0))
        else:
            found[m.id] = ("waiting", None)
    return found


def _state(message: Message, now: datetime, stalled_after: float, dead: set[str]) -> State:
    return message_state(
        message.status, message.available_at, message.heartbeat_at,
        message.owner in dead, now, stalled_after,
    )  # fmt: skip


def show(backend: Backend, ident: int) -> Message:
    message = backend.get_message(ident)
    if message is None:
        raise NotFound(
            f"no message {ident}: it never existed, or it succeeded or was deleted; "
            "`mq list -q QUEUE` shows what is there"
        )
    return message


def state_of(config: Config, backend: Backend, message: Message) -> State:
    """The message's state (one of STATES) as `mq list` and `mq stats` tell it."""
    dead = backend.dead_owners([message.owner]) if message.status == Stored.PROCESSING else set()
    return _state(message, backend.now(), config.queue(message.queue).stalled_after, dead)


def show_activity(
    backend: Backend, message: Message, state: State
) -> tuple[str, float | None] | None:
    """For `mq show`: ("running", seconds) or ("waiting", None) for a message held by
    a live drain (``state`` processing); None for any other."""
    if state != State.PROCESSING:
        return None
    return activities(backend, [message], backend.now()).get(message.id)


# -- retry, delete, purge -------------------------------------------------------------


def change_by_id(
    backend: Backend, action: Action | str, ids: Sequence[int], force: bool
) -> ByIdResult:
    """`mq retry` / `mq delete`: the allowed ones are done; the refused (processing,
    without ``force``) and missing ones are reported back."""
    if action not in BY_ID:
        raise ConfigError(f"unknown action {action!r}")
    verb = Action(action)
    total = ByIdResult()
    for chunk in _chunks(list(dict.fromkeys(ids))):
        part = backend.change_by_id(verb, chunk, force)
        total.done += part.done
        total.refused.update(part.refused)
        total.missing += part.missing
    return total


def purge(
    config: Config,
    backend: Backend,
    queue: str,
    status: State | str | None = None,
    on_progress: Callable[[int], None] | None = None,
    force: bool = False,
    upto: int | None = None,
) -> int:
    """Delete a queue's messages (those in one of STATES), in bounded batches; how many.

    Only what exists when it starts (or up to id ``upto``): messages enqueued
    meanwhile stay. Each state means what `mq list --status` shows: "ready" leaves
    delayed messages alone, "stalled" is what `mq gc --stalled --delete` deletes,
    "processing" the live claims. With no status the queue's unique-key
    tombstones go too (not counted: not messages). Claimed messages may be
    running in a drain right now: with no status they are kept unless ``force``,
    and "processing" needs ``force`` (as `mq delete` refuses them without --force).
    """
    validate_queue_name(queue)
    if status is not None and status not in STATES:
        raise ConfigError(f"status must be one of {', '.join(STATES)}, not {status!r}")
    chosen = None if status is None else State(status)
    if chosen == State.PROCESSING and not force:
        raise ConfigError(
            "purge --status processing deletes messages drains may be running now: add "
            "--force (for messages of dead drains: mq gc --stalled --delete)"
        )
    last = backend.last_id(queue)
    if last is None:
        return 0
    last = last if upto is None else min(last, upto)
    if chosen == State.STALLED:
        report = Gc(config, backend, State.STALLED, queues=[queue], action=Action.DELETE).run()
        return report.queues[0].changed if report.queues else 0
    if chosen == State.PROCESSING:
        return _purge_claims(config, backend, queue, last, on_progress)
    deleted = 0
    unclaimed = [State.READY, State.DELAYED, State.FAILED]
    for each in [chosen] if chosen is not None or force else unclaimed:
        while count := backend.purge(queue, each, last, OPERATE_BATCH):
            deleted += count
            if on_progress is not None:
                on_progress(count)
    if chosen is None:
        while backend.purge(queue, Stored.DONE, last, OPERATE_BATCH):
            pass
    return deleted


def _purge_claims(
    config: Config,
    backend: Backend,
    queue: str,
    last: int,
    on_progress: Callable[[int], None] | None,
) -> int:
    """The live claims up to id ``last``: processing as `mq list` tells it, stalled ones kept."""
    stalled_after = config.queue(queue).stalled_after
    after = deleted = 0
    while after < last and (
        page := backend.list_messages(queue, State.PROCESSING, after, OPERATE_BATCH)
    ):
        after = page[-1].id
        now = backend.now()
        dead = backend.dead_owners([m.owner for m in page])
        ids = [
            m.id for m in page
            if m.id <= last and _state(m, now, stalled_after, dead) == State.PROCESSING
        ]  # fmt: skip
        if ids:
            count = len(backend.change_by_id(Action.DELETE, ids, True).done)
            deleted += count
            if on_progress is not None and count:
                on_progress(count)
    return deleted
