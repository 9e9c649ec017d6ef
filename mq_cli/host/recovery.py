"""Taking messages back from drains that are gone: find the stalled (or failed)
ones, requeue or delete them in bounded batches, call the queue's callback.

`mq gc` (ops/operate.py) and a drain with ``requeue_stalled: true`` both act
through here, so they requeue alike.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from mq_cli.backends.base import OPERATE_BATCH, Backend
from mq_cli.backends.liveness import mark_dead
from mq_cli.core.config import QueueConfig
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import MqError
from mq_cli.core.models import GcQueueResult, Message
from mq_cli.core.states import Action, State
from mq_cli.host import clock
from mq_cli.runners import handlers, make_runner

log = logging.getLogger("mq")

OnBatch = Callable[[list[Message]], None]


def stalled_note(older_than: float, by: str) -> tuple[str, str]:
    """last_error of a requeued stalled message, around its dead drain's owner token."""
    return (
        f"stalled: its drain's lock was free, or no heartbeat for over "
        f"{format_duration(older_than)}, from drain ",
        f"; requeued by {by}",
    )


def find(backend: Backend, kind: str, queue: str, bound: float, after: int | None) -> list[Message]:
    """A batch of matches: by id after ``after``, or (None) any batch, cheapest first."""
    if kind == State.STALLED:
        return backend.find_stalled(queue, bound, after, OPERATE_BATCH)
    return backend.find_failed(queue, after, OPERATE_BATCH)


def change(
    backend: Backend,
    kind: str,
    action: str,
    queue: QueueConfig,
    bound: float,
    batch: Sequence[Message],
    result: GcQueueResult,
    by: str = "mq gc --stalled --requeue",
) -> list[Message]:
    """Requeue or delete those of ``batch`` that still match, counted into ``result``;
    the ones changed (as they were found)."""
    name, ids = queue.name, [m.id for m in batch]
    if kind == State.STALLED and action == Action.REQUEUE:
        note = stalled_note(bound, by)
        ready, failed = backend.requeue_stalled(name, ids, bound, queue.max_errors, note)
        done = set(ready) | set(failed)
        result.now_failed += len(failed)
    elif kind == State.STALLED:
        done = set(backend.delete_stalled(name, ids, bound))
    elif action == Action.REQUEUE:
        done = set(backend.requeue_failed(name, ids))
    else:
        done = set(backend.delete_failed(name, ids))
    result.changed += len(done)
    return [m for m in batch if m.id in done]


def act_as_found(
    backend: Backend,
    kind: str,
    action: str,
    queue: QueueConfig,
    bound: float,
    result: GcQueueResult,
    on_changed: OnBatch | None = None,
    by: str = "mq gc --stalled --requeue",
) -> None:
    """Find a batch, change it, repeat. What was changed no longer matches, nor what
    changed meanwhile, so each pick finds the next ones: no sort over all matches per
    batch, and memory stays bounded however many there are."""
    while batch := find(backend, kind, queue.name, bound, None):
        result.matched += len(batch)
        changed = change(backend, kind, action, queue, bound, batch, result, by)
        if on_changed is not None and changed:
            on_changed(changed)


def call_back(
    path: str, queue: QueueConfig, messages: list[Message], hide: Sequence[str] = ()
) -> str | None:
    """Call an on_stalled/on_failed callback with the messages as a JSON list; None if it
    succeeded, else why not. A Python callback receives the list (its queue is in
    ``mq_cli.current_message().queue``); an ``exec:`` one reads the JSON on stdin."""
    payload = json.dumps([m.to_json() for m in messages]).encode()
    info = handlers.MessageInfo(0, queue.name, 0, messages[0].created_at)
    runner = make_runner(path, "json", hide)
    try:
        runner.start()
        outcome = runner.run(payload, info, queue.timeout or None, _nothing, 3600.0)
    except MqError as exc:  # it imported at the check, and not in the child
        return str(exc)
    finally:
        runner.close()
    return None if outcome.ok else (outcome.error or "the callback failed")


def clock_says_wait(state: clock.ClockState | None, queue: str, bound: float) -> bool:
    """True (and a warning) while a clock step makes heartbeat ages meaningless."""
    if state is None or state.step_at is None:
        return False
    resumes = state.stalled_resumes(bound)
    if resumes is not None:
        log.warning(
            "queue %s: the database's clock stepped at %s UTC; no message counts as stalled "
            "before %s UTC (a live drain's heartbeat may still carry the old clock)",
            queue, f"{state.step_at:%Y-%m-%d %H:%M:%S}", f"{resumes:%Y-%m-%d %H:%M:%S}",
        )  # fmt: skip
    return resumes is not None


def _nothing() -> None:
    pass


def requeue_stalled(
    backend: Backend, queue: QueueConfig, suspects: dict[str, float] | None = None
) -> tuple[int, int]:
    """`mq drain` with `requeue_stalled: true`: the same requeue as `mq gc --stalled
    --requeue -q QUEUE`. Returns (requeued, of which now failed at max_errors).
    ``suspects``: see liveness.mark_dead (a waiting drain keeps it between looks)."""
    mark_dead(backend, queue.name, suspects)
    if clock_says_wait(clock.observe_quietly(backend), queue.name, queue.stalled_after):
        return 0, 0
    result = GcQueueResult(queue.name)
    by = "mq drain (requeue_stalled)"
    act_as_found(
        backend, State.STALLED, Action.REQUEUE, queue, queue.stalled_after, result, None, by
    )
    return result.changed, result.now_failed
