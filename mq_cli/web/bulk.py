"""Retry or delete messages by id within one queue, or every message a filter matches.

Both go through ``MQ.retry`` / ``MQ.delete``, the calls behind `mq retry` and
`mq delete`: a processing message is refused unless ``force``, and each chunk
of ``CHUNK`` ids is its own short transaction. A filter is walked by id
(``MQ.browse``) up to ``upto``, the table's last id when the operator was shown
the count, so a message enqueued after the confirmation is never touched. A
run is one request, so it is one line of the audit log.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mq_cli.api import MQ
from mq_cli.core.errors import ConfigError, NotFound
from mq_cli.core.models import STATES
from mq_cli.core.states import BY_ID, Action
from mq_cli.core.states import Outcome as Result
from mq_cli.ops.browse import Filter

ACTIONS = BY_ID
#: messages found and changed per step
CHUNK = 1000
#: ids one request may name (each is looked up for its queue)
MAX_IDS = 1000
#: the largest id a database stores (BIGINT)
MAX_ID = 2**63 - 1
#: seconds a confirmation spends counting what a text filter matches (the page's
#: budget is 300 ms at 1M rows; past this the count is "at least")
COUNT_SECONDS = 0.15
#: messages one step of that count finds at most: small, so that the clock is read
#: often (a step of CHUNK read 5,000 rows: about a second on MariaDB at 1M)
COUNT_STEP = 200


@dataclass
class Outcome:
    done: int = 0
    refused: dict[int, str] = field(default_factory=dict)  # id -> the drain holding it
    missing: list[int] = field(default_factory=list)
    #: ids that exist in another queue than the one acted on: not touched
    not_in_queue: list[int] = field(default_factory=list)
    #: the queues of the ids acted on
    queues: set[str] = field(default_factory=set)

    def to_json(self) -> dict[str, object]:
        return {
            Result.DONE: self.done,
            "refused": {str(k): v for k, v in self.refused.items()},
            "missing": self.missing,
            "not_in_queue": self.not_in_queue,
        }

    def summary(self, action: Action, queue: str | None = None) -> str:
        verb = "requeued" if action == Action.RETRY else "deleted"
        text = f"{verb} {self.done} message(s)"
        if self.refused:
            text += (
                f"; {len(self.refused)} processing message(s) refused (held by a drain: "
                "tick force to take them anyway)"
            )
        if self.missing:
            text += f"; {len(self.missing)} not found (succeeded or deleted meanwhile)"
        if self.not_in_queue:
            text += f"; {len(self.not_in_queue)} not in queue {queue}: not touched"
        return text

    def counts(self) -> dict[str, int]:
        """What the audit line keeps besides the count: how many were not done, and why."""
        found = {
            "refused": len(self.refused),
            "missing": len(self.missing),
            "not_in_queue": len(self.not_in_queue),
        }
        return {name: n for name, n in found.items() if n}


def check_action(action: object) -> Action:
    """The action a form or a JSON body names, if it is retry or delete."""
    if not isinstance(action, str) or action not in ACTIONS:
        raise ConfigError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    return Action(action)


def parse_id(raw: str, name: str) -> int:
    """A message id (or upto) from a form or an address: decimal digits, 0 to MAX_ID."""
    if not raw.isascii() or not raw.isdecimal() or len(raw) > 19 or int(raw) > MAX_ID:
        raise ConfigError(f"{name} must be a message id (a whole number), not {raw!r}")
    return int(raw)


def check_ids(ids: list[int]) -> list[int]:
    if not ids:
        raise ConfigError("no message selected")
    if len(ids) > MAX_IDS:
        raise ConfigError(f"at most {MAX_IDS} ids at a time, not {len(ids)}")
    return list(dict.fromkeys(ids))


def split(mq: MQ, queue: str | None, ids: list[int]) -> tuple[list[int], Outcome]:
    """The ids of ``queue`` (None: of any queue); the others come back in the outcome,
    missing or elsewhere. ``Outcome.queues`` names the queues of the ids kept."""
    inside: list[int] = []
    outcome = Outcome()
    for ident in check_ids(ids):
        try:
            found = mq.show(ident).queue
        except NotFound:
            outcome.missing.append(ident)
            continue
        if queue is None or found == queue:
            inside.append(ident)
            outcome.queues.add(found)
        else:
            outcome.not_in_queue.append(ident)
    return inside, outcome


def by_ids(
    mq: MQ, action: Action, queue: str | None, ids: list[int], force: bool
) -> tuple[list[int], Outcome]:
    """Act on those of ``ids`` that are in ``queue`` (None: wherever they are):
    (the ids acted on, the outcome)."""
    inside, outcome = split(mq, queue, ids)
    if inside:
        change = mq.retry if action == Action.RETRY else mq.delete
        result = change(inside, force)
        outcome.done = len(result.done)
        outcome.refused.update(result.refused)
        outcome.missing += result.missing
    skipped = set(outcome.refused) | set(outcome.missing)
    return [i for i in inside if i not in skipped], outcome


def empty(chosen: Filter) -> bool:
    return not (chosen.state or chosen.error or chosen.unique_key)


def filter_json(chosen: Filter) -> dict[str, str | None]:
    """The filter as the audit log and the API write it."""
    return {"state": chosen.state, "error": chosen.error, "key": chosen.unique_key}


def describe(chosen: Filter) -> str:
    return (
        f"state={chosen.state or 'any'} error={chosen.error or ''!r} "
        f"key={chosen.unique_key or ''!r}"
    )


def matching(mq: MQ, queue: str, action: Action, chosen: Filter, force: bool, upto: int) -> Outcome:
    """Act on what ``chosen`` matches in ``queue``, ids up to ``upto``, to the end."""
    change = mq.retry if action == Action.RETRY else mq.delete
    total = Outcome()
    after: int | None = 0
    while after is not None and after < upto:
        page = mq.browse(queue, chosen, after, CHUNK)
        ids = [m.id for m in page.messages if m.id <= upto]
        if ids:
            part = change(ids, force)
            total.done += len(part.done)
            total.refused.update(part.refused)
            total.missing += part.missing
        after = page.next_after
    return total


def count(mq: MQ, queue: str, chosen: Filter, upto: int) -> tuple[int, str]:
    """How many messages ``chosen`` matches up to ``upto``, and how the figure is known:
    "exact", "about" (a state alone, or none, above the console's bound: the estimate of
    backends/counts.py) or "at least" (a text walked for COUNT_SECONDS, then stopped)."""
    if not (chosen.error or chosen.unique_key):
        return in_states(mq, queue, [chosen.state] if chosen.state else list(STATES))
    found, after = 0, 0
    started = time.monotonic()
    while after < upto:
        page = mq.browse(queue, chosen, after, COUNT_STEP)
        found += sum(1 for m in page.messages if m.id <= upto)
        if page.next_after is None:
            return found, "exact"
        after = page.next_after
        if time.monotonic() - started >= COUNT_SECONDS:
            return found, "at least"
    return found, "exact"


def in_states(mq: MQ, queue: str, states: Sequence[str]) -> tuple[int, str]:
    """The queue's messages in ``states`` as the console counts them (bounded: exact up
    to 10,000 per state, an estimate above), and "exact" or "about"."""
    counts = mq.stats(queue, estimate=True)[queue]
    total = sum(getattr(counts, state) for state in states)
    return total, "about" if set(states) & set(counts.estimated) else "exact"
