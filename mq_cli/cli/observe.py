"""`mq stats`, `mq status`, `mq pause`, `mq resume` and `mq stop`: what the queues and drains
hold and do."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from mq_cli.core.durations import format_duration
from mq_cli.core.errors import ConfigError, MqError

if TYPE_CHECKING:
    from mq_cli.ops.status import Throughput


from mq_cli.cli.common import State, cli, json_option, pass_state, queue_option


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
    summaries mq_wait_seconds and mq_duration_seconds (the last hour). When
    the run log cannot be read (tables missing, no SELECT for this user), FILE
    gets the gauges alone and the command exits 3 saying why.

    \b
    Example:  mq stats
              mq stats -q thumbnails --json
    Example (crontab, feeding node_exporter's textfile collector):
      * * * * *  /opt/mq/bin/mq stats --prometheus /var/lib/node_exporter/mq.prom
    """
    if queue is not None:
        state.mq.require_known(queue)
    result = state.mq.stats(queue)
    if prometheus_file:
        from mq_cli.ops import prometheus

        totals: dict[str, tuple[int, int]] | None = None
        hour: dict[str, Throughput] | None = None
        try:
            totals, hour = state.mq.run_log_figures()
        except MqError as exc:  # the gauges still go out; the run log's figures do not
            unreadable: MqError | None = exc
        else:
            unreadable = None
            if queue is not None:
                totals = {queue: totals.get(queue, (0, 0))}
                hour = {name: hour[name] for name in hour if name == queue}
        try:
            prometheus.write(prometheus_file, prometheus.render(result, None, totals, hour))
        except OSError as exc:
            raise _unwritable(prometheus_file, exc) from None
        if unreadable is not None:
            raise unreadable  # not exit 0 with a file that lacks the run log's metrics
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
@click.option(
    "--refresh", "refresh", metavar="SECONDS", type=click.IntRange(min=0),
    help="With --html: the page reloads itself in a browser every SECONDS (default 60, the "
    "cron line's minute; 0: never).",
)  # fmt: skip
@pass_state
def status(
    state: State, queue: str | None, as_json: bool, html_file: str | None, refresh: int | None
) -> None:
    """What runs now and how the queues fare: live drains, recent runs, throughput.

    From the run log every drain keeps (see docs/operating/status.md): each live
    drain (host:pid, queue, the message it runs now and for how long, the
    messages it holds), per queue the messages done and failed in the last
    minute and hour with wait and run time (p50/p95 over the last hour), the
    counts of `mq stats`, and the last runs of each queue.

    --html writes a page with the same and the failed and stalled messages
    with their last error, and step plots of throughput and backlog over the
    run log's history up to now (each write records a backlog sample for
    them). Each queue is marked problem (red: failed or stalled messages,
    drains that cannot start it), warning (amber: paused, or its oldest ready
    message waited over 5 minutes) or healthy (green), with the commands that
    repair each problem. The page reloads itself every --refresh seconds (60;
    0: never), so a browser left open follows the cron line.

    \b
    Example:  mq status
              mq status -q mail --json
    Example (crontab: a page for the web server, fresh every minute):
      * * * * *  /opt/mq/bin/mq status --html /var/www/html/mq/index.html
    Example (every 5 minutes, and the page reloads as often):
      */5 * * * *  /opt/mq/bin/mq status --html /var/www/html/mq/index.html --refresh 300
    """
    from mq_cli.ops.status import text

    if refresh is not None and not html_file:
        raise click.UsageError("--refresh goes with --html")
    result = state.mq.status(queue)
    if html_file:
        from mq_cli.ops import page as status_html

        page = state.mq.status_page(result, status_html.REFRESH if refresh is None else refresh)
        try:
            status_html.write(html_file, page)
        except OSError as exc:
            raise _unwritable(html_file, exc) from None
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


@cli.command()
@click.argument("drain", metavar="DRAIN")
@click.option(
    "--quiet", is_flag=True,
    help="End after the message(s) it claimed have run, claiming no more (none goes back "
    "to ready).",
)  # fmt: skip
@json_option
@pass_state
def stop(state: State, drain: str, quiet: bool, as_json: bool) -> None:
    """Ask one live drain, on any host, to stop (as SIGTERM does) or to end quietly.

    DRAIN is the drain as `mq status` names it: host:pid (the DRAIN column),
    or its owner token (`mq status --json`'s "owner"). The request is stored in
    the database; the drain reads it within 2 seconds (its queue's heartbeat,
    stalled_after/3, if that is shorter), wherever it runs. Stop: its running
    handler finishes (or hits its timeout), the messages it claimed and did
    not start go back to ready, and it exits 0. --quiet: it claims nothing
    more, runs what it claimed (with batch_size 1, its current message) and
    exits 0; an idle `--wait` drain ends at once. With `--processes N` each
    process is a drain of its own. `mq status` shows the run ended "stop" or
    "quiet" and who asked. An unknown name, or a drain that ended, is exit 2.

    \b
    Example:  mq status                      # live drains: web1:4242 ...
              mq stop web1:4242              # as `kill -TERM 4242` on web1
              mq stop web1:4242 --quiet      # after its current message
    """
    asked = state.mq.stop_drain(drain, quiet=quiet)
    if as_json:
        click.echo(json.dumps(asked.to_json()))
    else:
        click.echo(asked.text())


def _unwritable(path: str, exc: OSError) -> ConfigError:
    return ConfigError(
        f"cannot write {path}: {exc.strerror}; give a path in a directory this user can write"
    )


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    from mq_cli.core.render import table

    return table(headers, rows)


# The operators' commands (gc, list, show, retry, delete, purge) live in their
# own module; importing it registers them on the group above.
