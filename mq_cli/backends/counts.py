"""Counts at any size, for the console: bounded index reads, and an estimate above the bound.

The exact counts (`mq stats`, the `stats` statement) read every live row: 0.5 s
at 1M rows, seconds at 10M. The console asks for :func:`bounded` counts
instead. Each queue's count of each state is read from its index range and
stopped after ``above`` + 1 rows (`stats_bounded`), so it costs at most that
many index entries. A count that reaches the bound is estimated from a sample
of the table: :data:`WINDOWS` windows of :data:`WIDTH` consecutive ids spread
evenly over its id range, scaled by the share of the range they cover, kept
for :data:`SAMPLE_AGE` seconds. The
sample is the same for every backend and needs no planner statistics (which
may be stale, or absent on SQLite). Such a count is named in the
:class:`QueueStats`' ``estimated``; every other count is exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from mq_cli.backends.plumbing import Executor
from mq_cli.core.models import QueueStats
from mq_cli.core.states import State


class SqlOperate(Protocol):
    """What the counts read through: sqlops.SqlOperate (a Protocol: no import circle)."""

    db: Executor
    dead_owners: Callable[[list[str | None]], set[str]]

    def owner_counts(
        self, queue: str, stalled_after: float
    ) -> list[tuple[str | None, int, int]]: ...


#: the console's counts are exact up to this, estimated above it
ESTIMATE_ABOVE = 10_000
#: the sample: this many windows of ids, each this wide (at most 20,000 rows read),
#: taken again after this many seconds (a connection keeps its own)
WINDOWS = 20
WIDTH = 1_000
SAMPLE_AGE = 10.0
#: the counts stats_bounded returns, in its order
STATES = (State.READY, State.DELAYED, State.PROCESSING, State.FAILED)
#: priorities looked up one by one for the oldest ready message; the rest in one read
PRIORITIES = 20

Sample = dict[str, list[float]]


def bounded(
    ops: SqlOperate, queue: str | None, stalled_after: Callable[[str], float], above: int
) -> dict[str, QueueStats]:
    """Counts per queue (only queues holding live messages), exact up to ``above``."""
    db = ops.db
    names = [queue] if queue else [row[0] for row in db._rows(db._sql["queue_names"])]
    sample: Sample | None = None
    result: dict[str, QueueStats] = {}
    for name in names:
        row = db._rows(db._sql["stats_bounded"], (name, above + 1) * 5)[0]
        counts = dict(zip(STATES, (int(value or 0) for value in row), strict=True))
        if not any(counts.values()):
            continue
        estimated = [state for state in STATES if counts[state] > above]
        if estimated:
            sample = _kept_sample(ops) if sample is None else sample
            scaled = sample.get(name, [0.0] * len(STATES))
            for state in estimated:
                counts[state] = max(_rounded(scaled[STATES.index(state)]), above + 1)
        stalled = 0
        if State.PROCESSING in estimated:
            estimated.append(State.STALLED)  # too many to ask each one's drain
        elif counts[State.PROCESSING]:
            owners = ops.owner_counts(name, stalled_after(name))
            dead = ops.dead_owners([owner for owner, _, _ in owners])
            stalled = sum(total if owner in dead else old for owner, total, old in owners)
        oldest = _oldest_ready(ops, name) if counts[State.READY] else None
        result[name] = QueueStats(
            ready=counts[State.READY],
            delayed=counts[State.DELAYED],
            processing=counts[State.PROCESSING] - stalled,
            stalled=stalled,
            failed=counts[State.FAILED],
            oldest_ready_seconds=oldest,
            estimated=tuple(estimated),
        )
    return result


def _oldest_ready(ops: SqlOperate, queue: str) -> float | None:
    """Seconds since the oldest ready message became due: a few index steps (the first
    of each priority, and the first due delayed one), not a read of every ready row."""
    db = ops.db
    ages = [row[0] for row in db._rows(db._sql["first_due_age"], (queue,))]
    below = 1 << 31  # above any priority (an INTEGER)
    for _ in range(PRIORITIES):
        found = db._rows(db._sql["next_priority"], (queue, below))
        if not found:
            break
        below = int(found[0][0])
        ages += [row[0] for row in db._rows(db._sql["first_ready_age"], (queue, below))]
    else:  # so many priorities: the rest in one read of their part of the index
        ages += [row[0] for row in db._rows(db._sql["rest_ready_age"], (queue, below))]
    known = [float(age) for age in ages if age is not None]
    return max(max(known), 0.0) if known else None


def _kept_sample(ops: SqlOperate) -> Sample:
    """The connection's sample if it is recent: a big count moves little in seconds, and
    the console asks again every few."""
    kept = getattr(ops.db, "_mq_sample", None)
    if kept is not None and time.monotonic() - kept[0] < SAMPLE_AGE:
        found: Sample = kept[1]
        return found
    found = _sample(ops)
    ops.db._mq_sample = (time.monotonic(), found)  # type: ignore[attr-defined]
    return found


def _sample(ops: SqlOperate) -> Sample:
    """{queue: [ready, delayed, processing, failed]} scaled to the whole table."""
    db = ops.db
    low, high = db._rows(db._sql["id_span"])[0]
    if low is None:
        return {}
    low, high = int(low), int(high)
    span = high - low + 1
    windows = [(low, high + 1)]
    if span > WINDOWS * WIDTH:
        step = span / WINDOWS
        starts = (low + int((i + 0.5) * step) - WIDTH // 2 for i in range(WINDOWS))
        windows = [(start, start + WIDTH) for start in starts]
    read = sum(end - start for start, end in windows)
    found: Sample = {}
    for start, end in windows:
        for name, *values in db._rows(db._sql["stats_sample"], (start, end)):
            sums = found.setdefault(name, [0.0] * len(STATES))
            for i, value in enumerate(values):
                sums[i] += float(value or 0)
    scale = span / read
    return {name: [value * scale for value in sums] for name, sums in found.items()}


def _rounded(value: float) -> int:
    """Three significant digits: an estimate does not pretend to be exact."""
    if value < 1000:
        return round(value)
    digits = len(str(int(value))) - 3
    return int(round(value, -digits))
