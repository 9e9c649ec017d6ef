"""The `mq` command: parse flags, call the API, render text or JSON, map errors to exit codes.

Only this module imports click. Each command is a short call into ``api``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from . import SCHEMA_VERSION, __version__
from .durations import format_duration, parse_duration
from .errors import MqError

if TYPE_CHECKING:
    from .drain_types import DrainReport


class _Log:
    """The "mq" logger, set up on first use: `mq enqueue` and the like start
    faster without importing logging (a cold start is what cron pays)."""

    verbose = 0
    _logger: Any = None

    def get(self) -> Any:
        if self._logger is None:
            import logging

            level = (
                logging.DEBUG
                if self.verbose > 1
                else logging.INFO
                if self.verbose
                else logging.WARNING
            )
            logging.basicConfig(
                level=level, format="mq: %(message)s", stream=sys.stderr, force=True
            )
            self._logger = logging.getLogger("mq")
        return self._logger

    def info(self, *args: Any) -> None:
        self.get().info(*args)

    def warning(self, *args: Any) -> None:
        self.get().warning(*args)


log = _Log()


class State:
    """What the global options say; the config and connection are made on first use."""

    def __init__(self, config: str | None, database: str | None, verbose: int):
        self.config_path = config
        self.database_url = database
        self.verbose = verbose
        self._mq: Any = None

    @property
    def mq(self) -> Any:
        if self._mq is None:
            from .api import MQ
            from .config import load_config

            config = load_config(self.config_path, self.database_url)
            for warning in config.warnings:
                log.warning(warning)
            self._mq = MQ(config)
        return self._mq

    def close(self) -> None:
        if self._mq is not None:
            self._mq.close()


class MqGroup(click.Group):
    """Turns mq's own errors into one or two lines on stderr and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except MqError as exc:
            self._report(ctx, exc, str(exc))
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # Output piped into `head` and friends: stop quietly.
            sys.stderr.close()
            ctx.exit(0)
        except Exception as exc:  # a bug in mq: say so, without a traceback unless -v
            self._report(
                ctx, exc, f"internal error: {type(exc).__name__}: {exc} (run with -v for details)"
            )
            ctx.exit(1)
        finally:
            state = ctx.find_object(State)
            if state is not None:
                state.close()

    @staticmethod
    def _report(ctx: click.Context, exc: BaseException, text: str) -> None:
        state = ctx.find_object(State)
        if state is not None and state.verbose:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        for line in text.splitlines() or [""]:
            click.echo(f"mq: {line}", err=True)


class Progress:
    """A running count on stderr while a long operation works; only on a terminal
    (cron and pipes get nothing)."""

    def __init__(self, label: str):
        self.label = label
        self.count = 0
        self.live = sys.stderr.isatty()

    def add(self, count: int) -> None:
        self.count += count
        if self.live:
            sys.stderr.write(f"\r{self.label}: {self.count}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.live and self.count:
            sys.stderr.write("\n")


def _duration(ctx: click.Context, param: click.Parameter, value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def queue_option(required: bool = False, multiple: bool = False) -> Callable[[Any], Any]:
    return click.option(
        "-q",
        "--queue",
        "queues" if multiple else "queue",
        required=required,
        multiple=multiple,
        metavar="QUEUE",
        help="The queue" + (" (repeat for several)." if multiple else "."),
    )


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(cls=MqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c", "--config", envvar="MQ_CONFIG", metavar="PATH",
    help="Config file (env MQ_CONFIG). Default: ./mq.yaml, $XDG_CONFIG_HOME/mq/config.yaml, "
    "/etc/mq/config.yaml, else built-in defaults.",
)  # fmt: skip
@click.option(
    "-d", "--database", envvar="MQ_DATABASE_URL", metavar="URL",
    help="Database URL (env MQ_DATABASE_URL), overriding the config's: mysql://user:pw@host/db "
    "or sqlite:////abs/path.db",
)  # fmt: skip
@click.option(
    "-v", "--verbose", count=True, help="Log more (repeat for debug); tracebacks on errors."
)
@click.version_option(
    __version__,
    "--version",
    prog_name="mq",
    message=f"%(prog)s %(version)s (schema {SCHEMA_VERSION})",
)
@click.pass_context
def cli(ctx: click.Context, config: str | None, database: str | None, verbose: int) -> None:
    """mq: a message queue in your database, drained by cron. No daemon.

    \b
    Producers:  echo '{"id": 1}' | mq enqueue -q thumbnails
    Cron:       * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 55
    Operators:  mq stats; mq gc --stalled; mq gc --errors

    Exit codes: 0 done; 1 a check found something or input was rejected;
    2 usage or configuration error; 3 the database could not be reached.
    """
    log.verbose = verbose
    log._logger = None  # a new invocation (tests run many in one process)
    ctx.obj = State(config, database, verbose)


pass_state = click.make_pass_decorator(State)


# -- init -------------------------------------------------------------------


@cli.command()
@click.option("--print-sql", is_flag=True, help="Print the DDL and touch nothing.")
@pass_state
def init(state: State, print_sql: bool) -> None:
    """Create the queue table(s), or migrate them; safe to run again.

    On an existing table: migrates it from an older schema version, restores a
    lost column or index, and prints each thing it did.

    \b
    Example:  mq -d mysql://admin@db1/app init
              mq init --print-sql > schema.sql
    """
    if print_sql:
        for statement in state.mq.ddl():
            click.echo(statement + ";\n")
        return
    for line in state.mq.init():
        click.echo(line)
    config = state.mq.config
    click.echo(f"schema ready: table {config.table} in {config.database.describe()}")


# -- enqueue ----------------------------------------------------------------


@cli.command()
@queue_option(required=True)
@click.argument("payloads", nargs=-1, metavar="[PAYLOAD]...")
@click.option("-l", "--lines", is_flag=True, help="Read stdin: each non-blank line is one message.")
@click.option(
    "-0", "--null", is_flag=True, help="Read stdin: NUL-separated messages (find -print0)."
)
@click.option(
    "--delay",
    callback=_duration,
    metavar="DURATION",
    help="Ready only after this (30s, 5m, 1h, 1h30m).",
)
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option(
    "--unique-key", metavar="KEY", help="Skip if the queue still holds a message with KEY."
)
@click.option("--silent", is_flag=True, help="Do not print the new ids.")
@pass_state
def enqueue(
    state: State,
    queue: str,
    payloads: tuple[str, ...],
    lines: bool,
    null: bool,
    delay: float | None,
    priority: int,
    unique_key: str | None,
    silent: bool,
) -> None:
    """Add messages to a queue; print each new id on its own line.

    Each PAYLOAD argument is one message. With none, stdin is read: all of it
    as one message, or one per line (--lines), or NUL-separated (-0). A json
    queue (the default format) rejects invalid JSON: mq stops at the first bad
    item, keeps what it stored before it, names it (line N) and exits 1.

    \b
    Examples:
      mq enqueue -q mail '{"to": "ann@example.com"}'
      jq -c '.[]' jobs.json | mq enqueue -q thumbnails --lines
      mq enqueue -q report --delay 1h --unique-key daily-2026-11-20 '{}'
    """
    from . import inputs
    from .config import validate_queue_name
    from .errors import InputRejected

    validate_queue_name(queue)
    if lines and null:
        raise click.UsageError("--lines and --null exclude each other")
    if payloads and (lines or null):
        raise click.UsageError("--lines/--null read stdin: give no PAYLOAD arguments with them")
    stdin = sys.stdin.buffer
    if not payloads and stdin.isatty():
        raise click.UsageError("give PAYLOAD arguments, or pipe messages into stdin")
    mq = state.mq
    if payloads:
        # One bad argument rejects them all: check every one before storing any.
        from .payloads import check_payload

        fmt = mq.queue(queue).format
        items = [(f"argument {i}", os.fsencode(p)) for i, p in enumerate(payloads, 1)]
        for label, data in items:
            try:
                check_payload(data, fmt)
            except ValueError as exc:
                raise InputRejected(
                    f"{label}: {exc} (queue {queue!r} is {fmt}); nothing was stored"
                ) from None
        source: Any = items
    else:
        limit = mq.backend.max_payload
        split = inputs.lines if lines else inputs.nul_separated if null else inputs.whole
        source = split(stdin, limit)
    skipped = 0
    progress = Progress(f"enqueued to {queue}")
    try:
        for ids in mq.enqueue_stream(
            queue, source, delay=delay or 0.0, priority=priority, unique_key=unique_key
        ):
            _print_ids(ids, silent)
            skipped += ids.count(None)
            progress.add(len(ids))
    finally:
        progress.close()
    if skipped:
        log.warning(
            "skipped %d message(s): queue %r already holds unique key %r",
            skipped,
            queue,
            unique_key,
        )


def _print_ids(ids: list[int | None], silent: bool) -> None:
    if silent:
        return
    text = "".join(f"{i}\n" for i in ids if i is not None)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


# -- drain ------------------------------------------------------------------


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
@click.option("--wait", is_flag=True, help="When empty, keep polling until --max-seconds.")
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
    all of a queue's slots on this host are busy. Runs until no ready message
    is left, or --max-messages / --max-seconds (both count the whole run); with
    --wait it waits until --max-seconds: an enqueue on this host (or any, on
    PostgreSQL) wakes it at once, its own retries start when their backoff
    ends, anything else within a second (its poll). SIGTERM/SIGINT: the running
    handler finishes, unstarted messages go back to ready, exit 0.
    Silent on success (cron mails any output); failures go to stderr.

    \b
    --processes N starts N such drains of each queue at once, as N crontab
    lines would (0: one per slot of the queue's concurrency), and prints one
    summary; its exit code is the worst of theirs.

    \b
    Example (crontab):
      * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 55
      * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 55 --processes 0
    Example (one-off):
      mq drain -q demo --handler 'exec:cat' --max-messages 10
    """
    from .drain_types import DrainOptions

    if processes is not None:
        _drain_processes(
            state, queues, processes, handler, max_messages, max_seconds, batch_size,
            concurrency, wait, as_json,
        )  # fmt: skip
        return

    log.get()  # the drain logs as it goes (mq_cli.drain): set the level and format first
    # At a terminal (not under cron, not in a pipe) a person watches: a running
    # count, and a summary at the end. The log lines of -v are enough there.
    watched = sys.stderr.isatty() and not as_json and not state.verbose
    counter = DrainCounter() if watched else None
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
    from . import fanout

    if max_messages is not None:
        raise click.UsageError(
            "--max-messages counts the messages of one drain: with --processes, "
            "bound the run with --max-seconds"
        )
    config = state.mq.config
    if not queues and not config.queues:
        from .errors import ConfigError

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


class DrainCounter:
    """The running count of a drain at a terminal, redrawn at most 10 times a second."""

    def __init__(self) -> None:
        self.shown = 0.0
        self.drawn = False

    def show(self, report: DrainReport) -> None:
        now = time.monotonic()
        if now - self.shown >= 0.1:
            self.shown = now
            self.drawn = True
            # The cursor goes back to the start: a log line (a failure) then
            # overwrites the count instead of running on after it.
            sys.stderr.write(f"draining: {report.succeeded} succeeded, {report.failed} failed\r")
            sys.stderr.flush()

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\033[K")  # the summary line takes its place
            sys.stderr.flush()


# -- stats ------------------------------------------------------------------


@cli.command()
@queue_option()
@json_option
@click.option(
    "--prometheus", "prometheus_file", metavar="FILE",
    help="Also write the figures to FILE in the node_exporter textfile format (atomically).",
)  # fmt: skip
@pass_state
def stats(state: State, queue: str | None, as_json: bool, prometheus_file: str | None) -> None:
    """Counts per queue: ready, delayed, processing, stalled, failed, oldest ready age.

    --prometheus adds, from the run log (see `mq status`), the counters
    mq_succeeded_total and mq_failed_total (over the retained history) and the
    summaries mq_wait_seconds and mq_duration_seconds (the last hour).

    \b
    Example:  mq stats
              mq stats -q thumbnails --json
    Example (crontab, feeding node_exporter's textfile collector):
      * * * * *  /opt/mq/bin/mq stats --prometheus /var/lib/node_exporter/mq.prom
    """
    result = state.mq.stats(queue)
    if prometheus_file:
        from . import prometheus

        totals, hour = state.mq.run_log_figures()
        if queue is not None:
            totals = {queue: totals.get(queue, (0, 0))}
            hour = {name: hour[name] for name in hour if name == queue}
        try:
            prometheus.write(prometheus_file, prometheus.render(result, None, totals, hour))
        except OSError as exc:
            raise click.FileError(prometheus_file, exc.strerror) from None
        if not as_json:
            return
    if as_json:
        click.echo(json.dumps({name: s.to_json() for name, s in result.items()}))
        return
    if not result:
        click.echo("no queues configured and no messages stored")
        return
    headers = ["QUEUE", "READY", "DELAYED", "PROCESSING", "STALLED", "FAILED", "OLDEST READY"]
    rows = [
        [name + (" (paused)" if s.paused else ""), s.ready, s.delayed, s.processing, s.stalled,
         s.failed, format_duration(s.oldest_ready_seconds)]
        for name, s in result.items()
    ]  # fmt: skip
    click.echo(_table(headers, rows))


# -- status -----------------------------------------------------------------


@cli.command()
@queue_option()
@json_option
@click.option(
    "--html", "html_file", metavar="FILE",
    help="Write one self-contained HTML page to FILE (atomically) and print nothing else "
    "(unless --json).",
)  # fmt: skip
@pass_state
def status(state: State, queue: str | None, as_json: bool, html_file: str | None) -> None:
    """What runs now and how the queues fare: live drains, recent runs, throughput.

    From the run log every drain keeps (see README, "The run log"): each live
    drain (host:pid, queue, the message it runs now and for how long, the
    messages it holds), per queue the messages done and failed in the last
    minute and hour with wait and run time (p50/p95 over the last hour), the
    counts of `mq stats`, and the last runs of each queue.

    --html writes a page with the same and the failed and stalled messages
    with their last error, and plots of throughput and backlog over the run
    log's history (each write records a backlog sample for them).

    \b
    Example:  mq status
              mq status -q mail --json
    Example (crontab: a page for the web server, fresh every minute):
      * * * * *  /opt/mq/bin/mq status --html /var/www/html/mq/index.html
    """
    from .status import text

    result = state.mq.status(queue)
    if html_file:
        from . import status_html

        page = state.mq.status_page(result)
        try:
            status_html.write(html_file, page)
        except OSError as exc:
            raise click.FileError(html_file, exc.strerror) from None
        if not as_json:
            return
    if as_json:
        click.echo(json.dumps(result.to_json()))
        return
    click.echo(text(result))


@cli.command()
@queue_option(required=True, multiple=True)
@pass_state
def pause(state: State, queues: tuple[str, ...]) -> None:
    """Stop drains of a queue on every host, until `mq resume`; enqueue still works.

    Stored in the database, so it holds for every host and every later cron
    run: a drain skips a paused queue silently (`drain --json` lists it under
    "paused"), and a running one stops claiming within seconds (the messages
    it holds finish). `mq stats` shows it.

    \b
    Example:  mq pause -q mail        # an incident: stop sending
              mq resume -q mail
    """
    for queue in queues:
        if state.mq.pause(queue):
            click.echo(
                f"queue {queue} paused: drains on every host skip it until `mq resume -q {queue}`"
            )
        else:
            click.echo(f"queue {queue} was paused already (since {state.mq.paused()[queue]})")


@cli.command()
@queue_option(required=True, multiple=True)
@pass_state
def resume(state: State, queues: tuple[str, ...]) -> None:
    """Let drains take a paused queue's messages again (see `mq pause`).

    \b
    Example:  mq resume -q mail
    """
    for queue in queues:
        if state.mq.resume(queue):
            click.echo(f"queue {queue} resumed")
        else:
            click.echo(f"queue {queue} was not paused")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    from .render import table

    return table(headers, rows)


# The operators' commands (gc, list, show, retry, delete, purge) live in their
# own module; importing it registers them on the group above.
from . import cli_operate  # noqa: E402, F401


def main() -> None:
    cli(prog_name="mq")
