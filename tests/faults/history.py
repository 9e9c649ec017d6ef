"""The history of a fault run, and the checker of the queue's guarantees.

Handlers (tests/faults/jobs.py) append one JSON line per event to a history
file: ``{"msg": KEY, "pid": WORKER_PID, "drain": DRAIN_PID, "event":
"start" | "success" | "fail", "t": UNIX_TIME}``. Each line is written with a
single ``os.write`` on an ``O_APPEND`` descriptor, so lines from concurrent
processes never interleave. A message's identity is the ``k`` field of its
payload (its database id is not known to the producer of every scenario).

:func:`check` takes that history, what was enqueued, what disrupted the run
(drains killed -9, drains that gave up with exit 3, drains cut off from the
database) and the final rows of the table, and returns every violation of the
contract it finds, with figures for the report. It is a plain function so
that its own unit tests can feed it synthetic histories.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EVENTS = ("start", "success", "fail")
# Runs are timed by different processes of one host (one kernel clock); this
# slack only absorbs the rounding of the timestamps.
CLOCK_SLACK = 0.001


def record(path: str | os.PathLike[str], **fields: object) -> None:
    """Append one JSON line to ``path`` in one write (safe across processes)."""
    line = (json.dumps(fields, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        written = os.write(fd, line)
    finally:
        os.close(fd)
    if written != len(line):  # never for a short line on a local file system
        raise OSError(f"short write to {path}: {written} of {len(line)} bytes")


#: The drain that started this handler process, read once at import (the drain is
#: alive then: it waits for the handler to be ready). os.getppid() at each record
#: says 1 when the drain was killed between its last look and the handler's first
#: record, which left that run attributed to no drain and its kill unexplained.
DRAIN = os.getppid()


def event(path: str | os.PathLike[str], msg: str, kind: str) -> None:
    """The record a handler writes: which message, which process, what, when."""
    record(path, msg=msg, pid=os.getpid(), drain=DRAIN, event=kind, t=time.time())


def read(path: str | os.PathLike[str]) -> list[dict]:
    """Every record of a history file (none if it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    records = []
    for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        try:
            records.append(json.loads(line))
        except ValueError as exc:
            raise AssertionError(f"{path} line {number} is torn or not JSON: {line!r}") from exc
    return records


@dataclass(frozen=True)
class Disruption:
    """Something that may legitimately make a message run again.

    ``drain`` is the pid of the drain process it hit, ``t`` when it happened,
    ``cause`` a short word for the report ("kill -9", "exit 3", "host cut",
    "server down").
    """

    drain: int
    t: float
    cause: str


@dataclass
class Run:
    msg: str
    pid: int
    drain: int
    start: float
    end: float | None = None
    outcome: str | None = None  # "success", "fail" or None (never finished)


@dataclass
class Final:
    """One row left in the table at the end."""

    msg: str
    queue: str
    status: str
    error_count: int


@dataclass
class Analysis:
    violations: list[str] = field(default_factory=list)
    messages: int = 0
    runs: int = 0
    successes: int = 0
    failures: int = 0
    interrupted: int = 0  # runs that never finished (their drain was disrupted)
    duplicates: int = 0  # runs of a message after one of its runs had succeeded
    duplicate_causes: Counter = field(default_factory=Counter)
    failed: int = 0  # messages left `failed`, as designed
    disruptions: int = 0

    def figures(self) -> str:
        causes = ", ".join(f"{n} after {c}" for c, n in sorted(self.duplicate_causes.items()))
        return (
            f"messages={self.messages} runs={self.runs} successes={self.successes} "
            f"handler_failures={self.failures} interrupted={self.interrupted} "
            f"failed_for_good={self.failed} lost={self.lost} "
            f"duplicates={self.duplicates}" + (f" ({causes})" if causes else "")
        )

    @property
    def lost(self) -> int:
        return sum(1 for v in self.violations if v.startswith("lost:"))


def runs_of(events: Iterable[Mapping]) -> list[Run]:
    """Pair each start with the next event of the same worker process.

    A worker runs one message at a time, so its events alternate start /
    outcome. A start followed by another start (or by nothing) is a run that
    never finished: its worker was killed.
    """
    open_runs: dict[int, Run] = {}
    runs: list[Run] = []
    for e in sorted(events, key=lambda e: e["t"]):
        # By worker pid only: the drain pid of an outcome written just after
        # its drain was killed is already the reaper's.
        pid = int(e["pid"])
        kind = e["event"]
        if kind not in EVENTS:
            raise ValueError(f"unknown event {kind!r} in {e}")
        if kind == "start":
            run = Run(str(e["msg"]), pid, int(e["drain"]), float(e["t"]))
            open_runs[pid] = run
            runs.append(run)
            continue
        run = open_runs.pop(pid, None)
        if run is None or run.msg != e["msg"]:
            # An outcome without its start: the history itself is broken.
            t = float(e["t"])
            runs.append(Run(str(e["msg"]), pid, int(e["drain"]), t, t, "orphan"))
            continue
        run.end = float(e["t"])
        run.outcome = kind
    return runs


def check(
    events: Sequence[Mapping],
    *,
    enqueued: Mapping[str, str],
    final: Sequence[Final],
    max_errors: Mapping[str, int],
    disruptions: Sequence[Disruption] = (),
    requeued: Mapping[str, int] | None = None,
    batch_size: int = 10,
) -> Analysis:
    """Every violation of the guarantees the run shows, and its figures.

    - ``enqueued``: message key -> queue, for every message the run enqueued;
    - ``final``: the rows left in the table once everything was drained;
    - ``max_errors``: queue -> its max_errors;
    - ``disruptions``: what hit which drain, and when;
    - ``requeued``: message key -> how often `gc --stalled --requeue` put it
      back (each counts as a failure, per the contract).

    The rules: every message succeeded at least once and is gone, or is
    `failed` after really failing max_errors times (handler failures plus
    stalled requeues); nothing is left ready or processing; nothing unknown
    appears; a run that never finished, a run of a message after one of its
    runs succeeded, and two runs of a message at the same time are each
    explained by a disruption of the drain that held it first; and no
    disrupted drain explains more than ``batch_size`` duplicates.
    """
    requeued = requeued or {}
    result = Analysis(messages=len(enqueued), disruptions=len(disruptions))
    bad = result.violations.append
    hits: dict[int, list[Disruption]] = defaultdict(list)
    for d in disruptions:
        hits[d.drain].append(d)

    def disrupted(run: Run) -> Disruption | None:
        """The disruption that explains what happened after ``run`` began, if any."""
        for d in hits.get(run.drain, ()):
            if d.t >= run.start - CLOCK_SLACK:
                return d
        return None

    runs = runs_of(events)
    result.runs = len(runs)
    by_msg: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_msg[run.msg].append(run)
        if run.outcome == "orphan":
            bad(f"broken history: {run.msg} has an outcome without a start (pid {run.pid})")
    rows: dict[str, list[Final]] = defaultdict(list)
    for row in final:
        rows[row.msg].append(row)

    for msg in sorted(set(by_msg) - set(enqueued)):
        bad(f"unknown message ran: {msg} was never enqueued")
    for msg in sorted(set(rows) - set(enqueued)):
        bad(f"unknown message stored: {msg} was never enqueued")

    # A disrupted drain loses at most one batch of acknowledgements: at most
    # batch_size distinct messages run again because of it (each may run
    # again more than once: a rerun that fails does not make it done).
    per_drain_duplicates: dict[int, set[str]] = defaultdict(set)
    rerun: set[tuple[int, str]] = set()  # (drain of the lost success, message), explained or not
    for msg, queue in sorted(enqueued.items()):
        mine = sorted(by_msg.get(msg, []), key=lambda r: r.start)
        stored = rows.get(msg, [])
        successes = [r for r in mine if r.outcome == "success"]
        fails = [r for r in mine if r.outcome == "fail"]
        result.successes += len(successes)
        result.failures += len(fails)
        if len(stored) > 1:
            bad(f"stored twice: {msg} has {len(stored)} rows")
        row = stored[0] if stored else None

        # -- at least once, nothing lost, nothing left behind ------------------
        if row is None and not successes:
            bad(f"lost: {msg} ({queue}) never succeeded and is no longer stored")
        if row is not None and row.status != "failed":
            bad(f"left behind: {msg} ({queue}) is still {row.status}")
        if row is not None and row.status == "failed":
            result.failed += 1
            limit = max_errors[queue]
            counted = len(fails) + requeued.get(msg, 0)
            if row.error_count < limit:
                bad(
                    f"failed too early: {msg} is failed with error_count {row.error_count} < {limit}"
                )
            if counted < limit:
                bad(
                    f"failed without failing: {msg} is failed after {len(fails)} handler "
                    f"failure(s) and {requeued.get(msg, 0)} stalled requeue(s), "
                    f"max_errors is {limit}"
                )
            for r in successes:
                if disrupted(r) is None:
                    bad(f"success not recorded: {msg} succeeded (drain {r.drain}) yet is failed")

        # -- every irregular run is explained by a disruption -------------------
        for r in mine:
            if r.outcome is None:
                result.interrupted += 1
                if disrupted(r) is None:
                    bad(
                        f"unexplained interruption: {msg} started in drain {r.drain} "
                        f"(pid {r.pid}) at {r.start:.3f} and never finished"
                    )
        first_success: Run | None = None
        for r in mine:
            if first_success is not None and r.start > first_success.start:
                result.duplicates += 1
                rerun.add((first_success.drain, msg))
                cause = disrupted(first_success)
                if cause is None:
                    bad(
                        f"unexplained duplicate: {msg} ran again in drain {r.drain} at "
                        f"{r.start:.3f} after it succeeded in drain {first_success.drain} "
                        f"at {first_success.end:.3f}, which was not disrupted"
                    )
                else:
                    result.duplicate_causes[cause.cause] += 1
                    per_drain_duplicates[first_success.drain].add(msg)
                # the rerun's own success is what the next rerun must explain
                if r.outcome == "success":
                    first_success = r
            elif r.outcome == "success" and first_success is None:
                first_success = r
        for i, earlier in enumerate(mine):
            end = earlier.end if earlier.end is not None else float("inf")
            for later in mine[i + 1 :]:
                if later.start < end - CLOCK_SLACK and disrupted(earlier) is None:
                    bad(
                        f"concurrent runs: {msg} ran in drains {earlier.drain} and "
                        f"{later.drain} at once ({later.start:.3f} < {end:.3f})"
                    )
        limit = max_errors[queue]
        disrupted_fails = sum(1 for r in fails if disrupted(r) is not None)
        if len(fails) > limit + disrupted_fails:
            bad(f"ran after failing for good: {msg} failed {len(fails)} times, max_errors {limit}")

    for drain, msgs in per_drain_duplicates.items():
        if len(msgs) > batch_size:
            bad(
                f"too many duplicates: drain {drain} explains {len(msgs)} messages "
                f"> batch_size {batch_size}"
            )
    if len(rerun) > len(disruptions) * batch_size:
        bad(
            f"too many duplicates: {len(rerun)} messages > {len(disruptions)} disruptions "
            f"x batch_size {batch_size}"
        )
    return result


def final_rows(rows: Iterable[tuple]) -> list[Final]:
    """``Final`` rows from ``(queue, status, error_count, payload)`` tuples."""
    result = []
    for queue, status, error_count, payload in rows:
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        try:
            msg = str(json.loads(data)["k"])
        except (ValueError, KeyError, TypeError):
            msg = f"<unparseable payload {data[:40]!r}>"
        result.append(Final(msg, queue, status, int(error_count)))
    return result
