"""`mq drain`: one drain, or (--processes) several, and their summed report."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from mq_cli.drain.report import DrainReport


from mq_cli.cli.common import State, _duration, cli, json_option, log, pass_state, queue_option


@cli.command()
@queue_option(multiple=True)
@click.option("--handler", metavar="PATH", help="Handler for the queue(s), overriding the config.")
@click.option(
    "--max-messages", type=click.IntRange(min=1), metavar="N", help="Stop after N messages."
)
@click.option(
    "--max-seconds", callback=_duration, metavar="S", help="Start no message after S seconds."
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000),
    metavar="N",
    help="Messages claimed per transaction.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    metavar="N",
    help="Drains of a queue allowed at once on this host.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="When empty, wait for messages (an enqueue wakes it; it polls at least once a "
    "second) until --max-seconds; without --max-seconds, until stopped.",
)
@click.option(
    "--processes",
    type=click.IntRange(0, 256),
    metavar="N",
    help="Run up to N drains of each queue at once, each in its own slot "
    "(0: as many as its concurrency allows); one summary.",
)
@json_option
@pass_state
def drain(
    state: State,
    queues: tuple[str, ...],
    handler: str | None,
    max_messages: int | None,
    max_seconds: float | None,
    batch_size: int | None,
    concurrency: int | None,
    wait: bool,
    processes: int | None,
    as_json: bool,
) -> None:
    """Run the handler on ready messages; the command for crontab.

    With no -q, every configured queue in turn. Exits 0 at once, silently, when
    all of a queue's slots on this host are busy, unless one's drain ends within
    5 s (cron's next run of the line): then it waits and takes that slot over,
    so `--max-seconds 60` every minute leaves no second undrained. Runs until no ready message
    is left, or --max-messages / --max-seconds (both count the whole run); with
    --wait it waits until --max-seconds: an enqueue on this host (or any, on
    PostgreSQL) wakes it at once, its own retries start when their backoff
    ends, anything else within a second (its poll). SIGTERM/SIGINT: the running
    handler finishes (a second signal stops it), unstarted messages go back to
    ready, exit 0; a second signal while the database is away ends the drain at
    once (exit 3), leaving what it held to `mq gc --stalled --requeue`.
    Silent on success (cron mails any output); failures go to stderr.
    A database that goes away is waited for up to the run's end (a plain
    cron drain: 30 s); exit 3 only if it is still away then. --json
    prints what ran on every exit, and why the run ended ("ended"); it adds
    up: claimed = succeeded + failed + returned + unrecorded + left, and
    "for_gc" lists the ids it left processing. Holding messages past
    --max-seconds, it tries to record them for at most 5 s.

    \b
    --processes N starts N such drains of each queue at once, as N crontab
    lines would (0: one per slot of the queue's concurrency), and prints one
    summary; its exit code is the worst of theirs.

    \b
    Example (crontab):
      * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 60
      * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 60 --wait
      * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 60 --processes 0
    Example (one-off):
      mq drain -q demo --handler 'exec:cat' --max-messages 10
    """
    from mq_cli.drain import signals

    # From here on SIGTERM/SIGINT stop the drain as the contract says (exit 0), also
    # while it starts: its config, its handler's import, its first connection.
    early = signals.catch_early()
    try:
        _drain(state, queues, handler, max_messages, max_seconds, batch_size, concurrency,
               wait, processes, as_json)  # fmt: skip
    finally:
        early.restore()


def _drain(
    state: State,
    queues: tuple[str, ...],
    handler: str | None,
    max_messages: int | None,
    max_seconds: float | None,
    batch_size: int | None,
    concurrency: int | None,
    wait: bool,
    processes: int | None,
    as_json: bool,
) -> None:
    from mq_cli.core.errors import MqError
    from mq_cli.drain.report import DrainOptions

    if processes is not None:
        _drain_processes(
            state, queues, processes, handler, max_messages, max_seconds, batch_size,
            concurrency, wait, as_json,
        )  # fmt: skip
        return

    log.get()  # the drain logs as it goes (mq_cli.drain): set the level and format first
    # At a terminal (not under cron, not in a pipe) a person watches: a status
    # line, and a summary at the end. The log lines of -v are enough there.
    watched = sys.stderr.isatty() and not as_json and not state.verbose
    counter = StatusLine() if watched else None
    try:
        report = state.mq.drain(
            DrainOptions(
                queues=list(queues),
                handler=handler,
                max_messages=max_messages,
                max_seconds=max_seconds,
                batch_size=batch_size,
                concurrency=concurrency,
                wait=wait,
                progress=counter.show if counter else None,
            )
        )
    except MqError as exc:
        if as_json and exc.report is not None:  # what ran before the error, and why it ended
            click.echo(json.dumps(exc.report.to_json()))
        raise
    finally:
        if counter is not None:
            counter.close()
    summary = (
        f"drained {report.succeeded + report.failed} message(s): {report.succeeded} succeeded, "
        f"{report.failed} failed, {report.returned} returned in {report.seconds:.1f}s"
    )
    if as_json:
        click.echo(json.dumps(report.to_json()))
    elif watched:
        busy = f" (all slots busy: {', '.join(report.busy)})" if report.busy else ""
        click.echo(f"{summary}{busy}", err=True)
    else:
        log.info("%s", summary)


def _drain_processes(
    state: State,
    queues: tuple[str, ...],
    processes: int,
    handler: str | None,
    max_messages: int | None,
    max_seconds: float | None,
    batch_size: int | None,
    concurrency: int | None,
    wait: bool,
    as_json: bool,
) -> None:
    from mq_cli.drain import fanout

    if max_messages is not None:
        raise click.UsageError(
            "--max-messages counts the messages of one drain: with --processes, "
            "bound the run with --max-seconds"
        )
    config = state.mq.config
    if not queues and not config.queues:
        from mq_cli.core.errors import ConfigError

        raise ConfigError(
            "no queue to drain: give -q QUEUE, or configure queues (see config.example.yaml)"
        )
    args: list[str] = []
    for flag, value in (
        ("--handler", handler), ("--max-seconds", max_seconds),
        ("--batch-size", batch_size), ("--concurrency", concurrency),
    ):  # fmt: skip
        if value is not None:
            args += [flag, str(value)]
    if wait:
        args.append("--wait")
    children = fanout.plan(config, queues, processes, concurrency)
    env = fanout.child_env(state.config_path, state.database_url)
    report: DrainReport
    report, code = fanout.run(children, args, env, state.verbose)
    if as_json:
        click.echo(json.dumps({**report.to_json(), "processes": len(children)}))
    elif sys.stderr.isatty():
        click.echo(
            f"{len(children)} drain(s): {report.succeeded} succeeded, {report.failed} failed, "
            f"{report.returned} returned in {report.seconds:.1f}s",
            err=True,
        )
    if code:
        click.get_current_context().exit(code)


class StatusLine:
    """What a drain at a terminal does now, on one line of stderr: the queue, the
    message running and for how long (or that it waits), and the counts so far.
    Handler output and log lines erase it first (core/terminal.py)."""

    def __init__(self) -> None:
        self.text = ""
        self.shown = 0.0

    def show(self, report: DrainReport) -> None:
        from mq_cli.core import terminal

        now = time.monotonic()
        text = self.describe(report, now)
        if text != self.text and now - self.shown >= 0.1:
            self.text, self.shown = text, now
            terminal.draw(text)

    @staticmethod
    def describe(report: DrainReport, now: float) -> str:
        doing = report.activity
        took = int(now - doing.since)
        if doing.running is not None:
            what = f"running #{doing.running}" + (f" for {took}s" if took >= 1 else "")
        elif doing.waiting:
            what = "waiting for messages" + (f" ({took}s)" if took >= 1 else "")
        else:
            what = "claiming"
        return f"queue {doing.queue}: {what} · {report.succeeded} succeeded, {report.failed} failed"

    def close(self) -> None:
        from mq_cli.core import terminal

        terminal.clear()  # the summary line takes its place


# -- stats ------------------------------------------------------------------
