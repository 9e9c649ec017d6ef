"""A queue's health as the status page shows it: green, amber or red, each problem
that makes it so, and the commands that repair it.

Red needs an operator: failed messages (max_errors reached, kept for one), stalled
messages (their drain is gone) or drains that cannot start the queue. Amber may
need one: a paused queue, or a backlog whose oldest ready message has waited
longer than :data:`BACKLOG_AGE` (the drains do not run, or do not keep up).
Green is everything else. No HTML here (page.py renders it).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from mq_cli.core.durations import format_duration
from mq_cli.ops.status import QueueStatus

#: seconds the oldest ready message may wait before its queue is amber; five
#: cron minutes: a queue drained every minute never gets there
BACKLOG_AGE = 300.0

RED, AMBER, GREEN = "red", "amber", "green"
#: the word beside each colour: the page never tells by colour alone
WORDS = {RED: "problem", AMBER: "warning", GREEN: "healthy"}
_RANK = {GREEN: 0, AMBER: 1, RED: 2}


@dataclass(frozen=True)
class Problem:
    level: str  # RED or AMBER
    what: str
    #: (command, what it does), in the order to try them
    repairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Health:
    level: str
    problems: tuple[Problem, ...]

    @property
    def word(self) -> str:
        return WORDS[self.level]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def judge(name: str, queue: QueueStatus, backlog_age: float = BACKLOG_AGE) -> Health:
    """``queue``'s health, with the commands (for a shell: ``name`` quoted) that repair it."""
    s = queue.stats
    q = shlex.quote(name)
    problems: list[Problem] = []
    if s.failed:
        problems.append(Problem(RED, f"{_plural(s.failed, 'failed message')} (max_errors reached)", (
            (f"mq gc --errors -q {q}", "list them with their errors"),
            ("mq retry ID", "run one again (ids under Failed messages)"),
            (f"mq gc --errors --requeue -q {q}", "run them all again"),
        )))  # fmt: skip
    if s.stalled:
        problems.append(Problem(RED, f"{_plural(s.stalled, 'stalled message')} (their drain is gone)", (
            (f"mq gc --stalled -q {q}", "list them"),
            (f"mq gc --stalled --requeue -q {q}", "give them back to the drains"),
        )))  # fmt: skip
    if queue.limits.cannot_start is not None:
        since, error = queue.limits.cannot_start
        since = since.replace("T", " ").replace("Z", " UTC")
        problems.append(Problem(RED, f"no drain could start since {since}: {error}", (
            ("mq check", "check the config and the handlers"),
            (f"mq drain -q {q}", "run one at a terminal: the note goes once a drain starts"),
        )))  # fmt: skip
    if s.paused:
        problems.append(Problem(AMBER, "paused: drains on every host skip it", (
            (f"mq resume -q {q}", "let the drains take it again"),
        )))  # fmt: skip
    elif s.oldest_ready_seconds is not None and s.oldest_ready_seconds > backlog_age:
        waited = format_duration(s.oldest_ready_seconds)
        problems.append(Problem(
            AMBER, f"the oldest ready message has waited {waited} "
            f"(more than {format_duration(backlog_age)}): drains do not run or do not keep up",
            ((f"mq drain -q {q}", "drain it now; check the cron line and its concurrency"),),
        ))  # fmt: skip
    level = max((p.level for p in problems), key=_RANK.__getitem__, default=GREEN)
    return Health(level, tuple(problems))
