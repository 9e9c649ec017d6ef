"""`mq status`: live drains, recent runs and per-queue throughput from the run log.

No SQL here (backends/sqlrunlog.py) and no click (mq_cli/cli/): :func:`read` gathers
a :class:`Status` from the database; :meth:`Status.to_json` is the documented
`--json` shape; :func:`text` renders it for a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from mq_cli.core.models import QueueStats, Run, Slice
from mq_cli.core.states import STOP_KINDS, Action, Outcome
from mq_cli.host import runlog
from mq_cli.host.runlog import LIVE_WITHIN, Histogram
from mq_cli.ops.limits import QueueLimits

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config, QueueConfig


class Reader(Protocol):
    """What the status reads through (the API's MQ): a Protocol, so that this
    module depends on nothing above it."""

    @property
    def config(self) -> Config: ...

    def stats(self, queue: str | None = None, estimate: bool = False) -> dict[str, QueueStats]: ...

    def queue(self, name: str) -> QueueConfig: ...

    def require_known(self, queue: str, traces: bool = False, more: str = "") -> None: ...


#: runs read for "recent runs", and shown per queue
RUNS_READ = 200
RUNS_PER_QUEUE = 5
QUANTILES = (0.5, 0.95)


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Throughput:
    """One queue's results in a window: counts, and wait/duration percentiles."""

    done: int = 0
    failed: int = 0
    wait: Histogram = field(default_factory=Histogram)
    duration: Histogram = field(default_factory=Histogram)
    wait_sum: float = 0.0
    duration_sum: float = 0.0

    def add(self, piece: Slice) -> None:
        self.done += piece.done
        self.failed += piece.failed
        self.wait.merge(Histogram.decode(piece.wait_hist))
        self.duration.merge(Histogram.decode(piece.duration_hist))
        self.wait_sum += piece.wait_sum
        self.duration_sum += piece.duration_sum

    def quantiles(self, which: str) -> dict[str, float | None]:
        histogram = self.wait if which == "wait" else self.duration
        return {f"p{int(q * 100)}": _round(histogram.quantile(q)) for q in QUANTILES}


@dataclass
class QueueStatus:
    stats: QueueStats
    minute: Throughput
    hour: Throughput
    limits: QueueLimits = field(default_factory=QueueLimits)


@dataclass
class Status:
    now: float  # the database's clock, Unix seconds
    drains: list[Run]
    held: dict[str, int]  # owner -> processing messages
    runs: list[Run]  # newest first
    queues: dict[str, QueueStatus]
    #: owners of unended runs whose lock is free: killed, whatever seen_at says
    dead: frozenset[str] = frozenset()
    #: PostgreSQL: what holds the vacuum horizon (backends/postgres/horizon.facts); None elsewhere
    vacuum_horizon: dict[str, Any] | None = None

    def drain_row(self, run: Run) -> list[object]:
        """A live drain as the text and the HTML views show it: drain, queue, running
        for, message now, held, done, failed (not escaped)."""
        data = self.drain_json(run)
        running = data["running"]
        doing = f"#{running['id']} for {seconds_text(running['seconds'])}" if running else "-"
        return [
            f"{run.host}:{run.pid}", run.queue or ",".join(run.queues),
            seconds_text(data["seconds"]), doing, data["held"], run.succeeded, run.failed,
        ]  # fmt: skip

    def run_state(self, run: Run) -> str:
        if run.ended_at is not None:
            return "ended"
        if run.owner in self.dead:
            return "vanished"
        return "live" if run.seen_at >= self.now - LIVE_WITHIN else "vanished"

    def run_json(self, run: Run) -> dict[str, Any]:
        # A live run has run until now; a vanished one at least until it was last seen.
        state = self.run_state(run)
        end = (
            run.ended_at
            if run.ended_at is not None
            else self.now
            if state == "live"
            else run.seen_at
        )
        return {
            "id": run.id,
            "owner": run.owner,
            "host": run.host,
            "pid": run.pid,
            "queue": run.queue,
            "queues": list(run.queues),
            "state": state,
            "started_at": iso(run.started_at),
            "ended_at": iso(run.ended_at),
            "seconds": _round(max(end - run.started_at, 0.0)),
            "claimed": run.claimed,
            Outcome.SUCCEEDED: run.succeeded,
            Outcome.FAILED: run.failed,
            "returned": run.returned,
            "exit_code": run.exit_code,
            "ended": run.end_reason,  # `mq drain --json`'s word; "stop"/"quiet": `mq stop`
            "stop_request": _request(run),
        }

    def drain_json(self, run: Run) -> dict[str, Any]:
        data = self.run_json(run)
        del data["ended_at"], data["exit_code"], data["ended"]
        data["seconds"] = _round(max(self.now - run.started_at, 0.0))  # so far
        data["seen_at"] = iso(run.seen_at)
        data["held"] = self.held.get(run.owner, 0)
        data["running"] = None
        if run.running_id is not None and run.running_since is not None:
            data["running"] = {
                "id": run.running_id,
                "since": iso(run.running_since),
                "seconds": _round(max(self.now - run.running_since, 0.0)),
            }
        return data

    def to_json(self) -> dict[str, Any]:
        return {
            "now": iso(self.now),
            "drains": [self.drain_json(run) for run in self.drains],
            "runs": [self.run_json(run) for run in self.runs],
            "queues": {
                name: {
                    **q.stats.to_json(),
                    "last_minute": {Outcome.DONE: q.minute.done, Outcome.FAILED: q.minute.failed},
                    "last_hour": {Outcome.DONE: q.hour.done, Outcome.FAILED: q.hour.failed},
                    "wait_seconds": q.hour.quantiles("wait"),
                    "duration_seconds": q.hour.quantiles("duration"),
                    **q.limits.to_json(),
                }
                for name, q in self.queues.items()
            },
            **({"vacuum_horizon": self.vacuum_horizon} if self.vacuum_horizon is not None else {}),
        }


def _request(run: Run) -> dict[str, Any] | None:
    """An operator's request to the run (`mq stop`, ops/drains.py), if any."""
    if run.stop_request is None:
        return None
    return {"kind": run.stop_request, "by": run.stop_by, "at": iso(run.stop_at)}


def asked_text(run: Run) -> str:
    """A request to the run, as the text and the HTML views say it; "" if none."""
    if run.stop_request is None:
        return ""
    verb = Action.STOP if run.stop_request == Action.STOP else "end quietly"
    return f"asked to {verb} by {run.stop_by or 'someone'}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def hour_by_queue(backend: Backend, now: float) -> dict[str, Throughput]:
    """Each queue's results over the last hour."""
    found: dict[str, Throughput] = {}
    for piece in backend.rollup_since(now - 3600):
        found.setdefault(piece.queue, Throughput()).add(piece)
    return found


def read(mq: Reader, backend: Backend, queue: str | None = None, estimate: bool = False) -> Status:
    """What `mq status` shows; ``queue`` narrows it (an unknown one is exit 2);
    ``estimate``: the counts in bounded time, estimated above a bound (the console)."""
    unreadable = runlog.problem(backend)
    if unreadable is not None:
        raise unreadable
    stats = mq.stats(queue, estimate)
    now = backend.now().timestamp()
    slices = backend.rollup_since(now - 3600)
    recent = backend.runs_recent(RUNS_READ)
    live = backend.runs_live(now - LIVE_WITHIN)
    if queue is not None:
        known = queue in mq.config.queues or any(s.queue == queue for s in slices)
        known = known or any(queue in r.queues for r in recent) or stats[queue] != QueueStats()
        mq.require_known(queue, known, more=", no drain run recorded")
    names = {queue} if queue is not None else set(stats) | {s.queue for s in slices}
    from mq_cli.ops import limits as status_limits

    limits = status_limits.read(mq.config, backend, names)
    if queue is None:
        names |= limits.keys()  # a queue whose drains never start may have no other trace
    queues: dict[str, QueueStatus] = {}
    for name in sorted(names):
        queues[name] = QueueStatus(
            stats.get(name, QueueStats()), Throughput(), Throughput(), limits[name]
        )
    for piece in slices:
        entry = queues.get(piece.queue)
        if entry is None:
            continue
        entry.hour.add(piece)
        if piece.end >= now - 60:
            entry.minute.add(piece)

    def wanted(run: Run) -> bool:
        return queue is None or queue in run.queues

    runs: list[Run] = []
    shown: dict[str, int] = {}
    for run in recent:
        if not wanted(run):
            continue
        keys = [queue] if queue is not None else list(run.queues) or [run.queue or ""]
        if any(shown.get(key, 0) < RUNS_PER_QUEUE for key in keys):
            for key in keys:
                shown[key] = shown.get(key, 0) + 1
            runs.append(run)
    # A drain killed with -9 is gone at once where its lock says so (liveness.py).
    unended = [r.owner for r in [*live, *recent] if r.ended_at is None]
    dead = frozenset(backend.dead_owners(unended)) if unended else frozenset()
    live = [r for r in live if r.owner not in dead]
    held = backend.held_by_owner({r.queue for r in live if r.queue}) if live else {}
    horizon = backend.vacuum_horizon()
    return Status(now, [r for r in live if wanted(r)], held, runs, queues, dead, horizon)


# -- text ----------------------------------------------------------------------


def seconds_text(value: float | None) -> str:
    """A latency: ``850ms``, ``2.4s``, ``3m05s``."""
    from mq_cli.core.durations import format_duration

    if value is None:
        return "-"
    if value < 0.001:
        return "<1ms"
    if value < 1:
        return f"{value * 1000:.0f}ms"
    return format_duration(value)


def _took(run: dict[str, Any]) -> str:
    took = seconds_text(run["seconds"])
    # Vanished: killed without a word; it ran at least until its last sign of life.
    return f">{took}" if run["state"] == "vanished" else took


def _exit(run: Run, state: str) -> str:
    """The EXIT column: the code, or the state of a run not ended; and who stopped it."""
    shown = state if run.exit_code is None else str(run.exit_code)
    if run.end_reason in STOP_KINDS:
        shown += f" ({run.end_reason}: {run.stop_by or 'someone'})"
    from mq_cli.core.render import printable

    return printable(shown)


def text(status: Status) -> str:
    from mq_cli.core.render import printable, table

    parts = []
    if status.drains:
        rows = []
        for run in status.drains:
            drain, *rest = status.drain_row(run)
            rows.append([printable(str(drain)), *rest])
        headers = ["DRAIN", "QUEUE", "RUNNING FOR", "MESSAGE NOW", "HELD", "DONE", "FAILED"]
        asked = [
            f"  {run.host}:{run.pid}: {asked_text(run)}"
            for run in status.drains
            if run.stop_request
        ]
        parts.append(
            "live drains (`mq stop DRAIN` stops one, as SIGTERM; `--quiet`: after what it "
            "claimed):\n" + table(headers, rows) + "".join("\n" + printable(a) for a in asked)
        )
    else:
        parts.append("live drains: none")
    if status.queues:
        rows = []
        for name, q in status.queues.items():
            s = q.stats
            wait = q.hour.quantiles("wait")
            took = q.hour.quantiles("duration")
            rows.append([
                name + (" (paused)" if s.paused else ""), s.ready, s.delayed, s.processing,
                s.stalled, s.failed,
                seconds_text(s.oldest_ready_seconds),
                f"{q.minute.done}/{q.minute.failed}", f"{q.hour.done}/{q.hour.failed}",
                f"{seconds_text(wait['p50'])} / {seconds_text(wait['p95'])}",
                f"{seconds_text(took['p50'])} / {seconds_text(took['p95'])}",
            ])  # fmt: skip
        headers = ["QUEUE", "READY", "DELAYED", "PROCESSING", "STALLED", "FAILED", "OLDEST",
                   "DONE/FAILED 1M",
                   "DONE/FAILED 1H", "WAIT P50/P95", "RUN P50/P95"]  # fmt: skip
        parts.append("queues (wait and run time over the last hour):\n" + table(headers, rows))
        notes = [
            f"  {name}: {line}" for name, q in status.queues.items() for line in q.limits.lines()
        ]
        if notes:
            parts.append("queue limits and problems:\n" + "\n".join(printable(n) for n in notes))
    else:
        parts.append("queues: none configured, no messages stored, no drain recorded")
    if status.runs:
        rows = []
        for run in status.runs:
            data = status.run_json(run)
            rows.append([
                ",".join(run.queues) or run.queue, printable(f"{run.host}:{run.pid}"),
                seconds_text(status.now - run.started_at) + " ago",
                _took(data), run.claimed, run.succeeded, run.failed,
                run.returned, _exit(run, data["state"]),
            ])  # fmt: skip
        headers = ["QUEUE", "DRAIN", "STARTED", "TOOK", "CLAIMED", "DONE", "FAILED", "RETURNED",
                   "EXIT"]  # fmt: skip
        parts.append("recent runs:\n" + table(headers, rows))
    else:
        parts.append("recent runs: none recorded")
    return "\n\n".join(parts)
