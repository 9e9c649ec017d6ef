"""`mq init` and `mq enqueue`: the schema, and messages in."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    pass


from mq_cli.cli.common import Progress, State, _duration, cli, log, pass_state, queue_option


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
@click.option(
    "--silent",
    is_flag=True,
    help="Do not print the new ids (if mq stops part way, stderr still gives the stored ones).",
)
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
    Input is stored in batches of 1,000; a batch the database cannot store
    stops mq too (exit 3). Either way stderr then says, even with --silent,
    how many were stored and their ids, and from which line on nothing was.

    \b
    Examples:
      mq enqueue -q mail '{"to": "ann@example.com"}'
      jq -c '.[]' jobs.json | mq enqueue -q thumbnails --lines
      mq enqueue -q report --delay 1h --unique-key daily-2026-11-20 '{}'
    """
    from mq_cli.cli import inputs
    from mq_cli.core.config import validate_queue_name
    from mq_cli.core.errors import InputRejected

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
        from mq_cli.core.payloads import check_payload

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
    if text and sys.stdout is not None:  # stdout closed (`>&-`): stored, nowhere to say so
        sys.stdout.write(text)
        sys.stdout.flush()


# -- drain ------------------------------------------------------------------
