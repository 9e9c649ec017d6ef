"""`mq drain --processes N`: several drains of each queue at once from one command.

One crontab line then fills every slot of a queue: each child is a plain
`mq drain -q QUEUE --json` process, which takes a free slot of its own (or
finds them all busy and exits at once, as under cron) and drains as usual.
The parent only starts them, forwards SIGTERM/SIGINT, and adds up their
reports; it opens no database connection of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from mq_cli.core.config import Config
from mq_cli.drain import signals
from mq_cli.drain.report import DrainReport

#: exit codes by precedence: a database problem outranks a config error, then a rejection
_WORST = (3, 2, 1)
#: why the run ended, by precedence: the children's worst
_ENDED = ("database", "error", "signal", "stop", "deadline", "max_messages", "quiet", "empty")


def plan(
    config: Config, queues: Sequence[str], processes: int, concurrency: int | None
) -> list[str]:
    """The queue of each child to start, in order: ``processes`` per queue, or
    (0) as many as the queue's concurrency allows; never more than its max_drains
    (the others would find no fleet slot)."""
    names = list(queues) or list(config.queues)
    children = []
    for name in names:
        queue = config.queue(name)
        count = processes or concurrency or queue.concurrency
        children += [name] * min(count, queue.max_drains or count)
    return children


def run(
    children: Sequence[str],
    drain_args: Sequence[str],
    env: dict[str, str],
    verbose: int,
) -> tuple[DrainReport, int]:
    """Start one drain per entry of ``children`` (a queue name each), wait for all;
    (their reports added up, the exit code that sums them up)."""
    base = [sys.executable, "-m", "mq_cli", *["-v"] * verbose, "drain"]
    procs: list[subprocess.Popen] = []
    forwarded: set[int] = set()

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.add(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in signals.STOP_SIGNALS}
    early = signals.caught(previous.values())
    try:
        for queue in children:
            if early is not None or forwarded:  # asked to stop: start no more
                break
            with signals.blocked():  # one sent meanwhile waits for the child to catch it
                procs.append(
                    subprocess.Popen(
                        [*base, "-q", queue, *drain_args, "--json"],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        env=env,
                    )
                )
        outputs = [(proc.communicate()[0], proc.returncode) for proc in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # A child that died by the signal the parent passed on was stopped as asked before
    # it could catch it (signals.blocked() makes that rare): nothing of it ran.
    codes = [0 if -code in forwarded else code for _, code in outputs]
    for proc, code in zip(procs, codes, strict=True):
        if code < 0:
            sys.stderr.write(
                f"mq: a drain (pid {proc.pid}) was killed by {signal.Signals(-code).name}; "
                "what it held stays processing until gc takes it back\n"
            )
    total = _total([(out, code) for (out, _), code in zip(outputs, codes, strict=True)])
    if (early is not None or forwarded) and total.ended not in ("database", "error"):
        total.ended = "signal"
    return total, _exit_code(codes)


def _total(outputs: Sequence[tuple[bytes, int]]) -> DrainReport:
    total = DrainReport()
    drained: set[str] = set()
    busy: set[str] = set()
    ended: set[str] = set()
    for out, code in outputs:
        try:
            report = json.loads(out or b"{}")
        except ValueError:
            report = None  # a child that failed printed its error on stderr, not a report
        if not isinstance(report, dict) or "claimed" not in report:
            # No report: exit 3 (the database), or killed by a signal. A report says
            # why itself (exit 3 of a second signal while away: "signal").
            if code == 3 or code < 0:
                ended.add("database" if code == 3 else "signal")
            continue
        for key in ("claimed", "succeeded", "failed", "returned", "unrecorded", "lost"):
            setattr(total, key, getattr(total, key) + int(report.get(key, 0)))
        total.for_gc += [int(i) for i in report.get("for_gc", [])]
        total.seconds = max(total.seconds, float(report["seconds"]))
        drained.update(report["queues"])
        busy.update(report["busy"])
        ended.add(str(report.get("ended", "empty")))
    total.for_gc.sort()
    total.queues = sorted(drained)
    total.busy = sorted(busy - drained)  # busy for every child: no slot was free at all
    total.ended = next((reason for reason in _ENDED if reason in ended), "empty")
    return total


def _exit_code(codes: Sequence[int]) -> int:
    for code in _WORST:
        if code in codes:
            return code
    bad = [c for c in codes if c != 0]
    return 3 if bad else 0  # killed by a signal: its messages are left to gc, as for exit 3


def child_env(config_path: str | None, database_url: str | None) -> dict[str, str]:
    """The parent's environment, with -c/-d passed on as variables (not argv: `ps` shows
    argv to every user, and a database URL may hold a password)."""
    env = dict(os.environ)
    if config_path:
        env["MQ_CONFIG"] = config_path
    if database_url:
        env["MQ_DATABASE_URL"] = database_url
    return env
