"""Retry or delete messages by id, or every message a filter matches, in chunks.

Both go through ``MQ.retry`` / ``MQ.delete``, the calls behind `mq retry` and
`mq delete`: a processing message is refused unless ``force``, and each chunk
is its own short transaction. A filter is walked by id (``MQ.browse``), so a
run can stop after a time budget and go on from where it stopped: the page's
script posts chunk after chunk and shows the progress; a script's POST or a
page without script runs to the end in one request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mq_cli.api import MQ
from mq_cli.core.errors import ConfigError
from mq_cli.ops.browse import Filter

ACTIONS = ("retry", "delete")
#: messages found and changed per step
CHUNK = 1000


@dataclass
class Outcome:
    done: int = 0
    refused: dict[int, str] = field(default_factory=dict)  # id -> the drain holding it
    missing: list[int] = field(default_factory=list)
    #: where the next chunk starts; None: the filter is walked to its end
    next_after: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "done": self.done,
            "refused": {str(k): v for k, v in self.refused.items()},
            "missing": self.missing,
            "next_after": self.next_after,
        }

    def summary(self, action: str) -> str:
        verb = "requeued" if action == "retry" else "deleted"
        text = f"{verb} {self.done} message(s)"
        if self.refused:
            text += (
                f"; {len(self.refused)} processing message(s) refused (held by a drain: "
                "tick force to take them anyway)"
            )
        if self.missing:
            text += f"; {len(self.missing)} not found (succeeded or deleted meanwhile)"
        return text


def check_action(action: str) -> str:
    if action not in ACTIONS:
        raise ConfigError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    return action


def by_ids(mq: MQ, action: str, ids: list[int], force: bool) -> Outcome:
    change = mq.retry if check_action(action) == "retry" else mq.delete
    result = change(ids, force)
    return Outcome(len(result.done), dict(result.refused), list(result.missing))


def matching(
    mq: MQ,
    queue: str,
    action: str,
    chosen: Filter,
    force: bool,
    after: int = 0,
    budget: float | None = None,
) -> Outcome:
    """Act on what ``chosen`` matches in ``queue`` from id ``after``; with ``budget``
    (seconds), stop after the chunk that passes it and say where to go on."""
    check_action(action)
    total = Outcome(next_after=after)
    started = time.monotonic()
    while total.next_after is not None:
        page = mq.browse(queue, chosen, total.next_after, CHUNK)
        if page.messages:
            part = by_ids(mq, action, [m.id for m in page.messages], force)
            total.done += part.done
            total.refused.update(part.refused)
            total.missing += part.missing
        total.next_after = page.next_after
        if budget is not None and time.monotonic() - started >= budget:
            break
    return total
