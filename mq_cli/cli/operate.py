"""The operators' commands: `mq gc`, `list`, `show`, `retry`, `delete`, `purge`.

Part of the CLI (main.py imports this module last, which registers them on the
`mq` group). As there: parse flags, make one call into the API, render the
result (render.py), map the outcome to an exit code.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from mq_cli.cli.common import (
    MessageId,
    Progress,
    State,
    _duration,
    cli,
    json_option,
    pass_state,
    queue_option,
)
from mq_cli.core.states import Action
from mq_cli.core.states import State as MessageState

if TYPE_CHECKING:
    from mq_cli.core.models import GcReport, Message

# models.STATES as plain strings: click shows an Enum member's name, and returns members
STATES = tuple(state.value for state in MessageState)
PURGE_STATUS = (
    "Only the messages in this state, as `mq list --status` shows it: ready leaves delayed "
    "ones; stalled is what `mq gc --stalled --delete` deletes; processing needs --force."
)


def _exit(code: int) -> None:
    click.get_current_context().exit(code)


def _stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


# -- gc -----------------------------------------------------------------------------


@cli.command()
@click.option("--stalled", is_flag=True, help="Processing with no heartbeat for stalled_after.")
@click.option("--errors", is_flag=True, help="Failed: max_errors reached, kept for an operator.")
@click.option(
    "--older-than", callback=_duration, metavar="D",
    help="With --stalled: no heartbeat for longer than D (10m, 2h), not the queue's stalled_after.",
)  # fmt: skip
@click.option(
    "--requeue", is_flag=True,
    help="Back to ready (stalled: ready 1.5 s later, once a cut-off drain's handler "
    "has surely stopped; counts a failure, failed at max_errors; failed: at once, "
    "error count reset to 0).",
)  # fmt: skip
@click.option("--delete", is_flag=True, help="Delete them.")
@click.option("--check", is_flag=True, help="Exit 1 if any matched (an alert line for cron).")
@click.option(
    "--notify", is_flag=True,
    help="First call the queue's on_stalled / on_failed callback, once per queue, with them.",
)  # fmt: skip
@queue_option(multiple=True)
@json_option
@pass_state
def gc(
    state: State,
    stalled: bool,
    errors: bool,
    older_than: float | None,
    requeue: bool,
    delete: bool,
    check: bool,
    notify: bool,
    queues: tuple[str, ...],
    as_json: bool,
) -> None:
    """List, requeue or delete stalled or failed messages.

    With no action flag the matches are listed and nothing changes. --requeue
    and --delete change only messages that still match at that moment (one
    that finished or was claimed again meanwhile is left alone), in batches of
    1,000, and print how many they changed. --check exits 1 if anything
    matched. --notify calls the callback before any change; if it fails, that
    queue is left as it is and gc exits 1.

    \b
    Example (crontab):
      30 6 * * *  /opt/mq/bin/mq gc --errors --check
      15 * * * *  /opt/mq/bin/mq gc --stalled --requeue
    Example (by hand):
      mq gc --stalled --older-than 10m -q thumbnails
      mq gc --errors -q mail --requeue
    """
    from mq_cli.core import render

    if stalled == errors:
        raise click.UsageError("give one of --stalled or --errors")
    if requeue and delete:
        raise click.UsageError("--requeue and --delete exclude each other")
    if older_than is not None and not stalled:
        raise click.UsageError("--older-than goes with --stalled")
    kind = MessageState.STALLED if stalled else MessageState.FAILED
    action = Action.REQUEUE if requeue else Action.DELETE if delete else None
    mq = state.mq
    for queue in queues:
        mq.require_known(queue)
    out = render.JsonArray(click.echo) if as_json else None
    writer, to_rows = render.gc_table(kind)
    now = None
    progress = Progress(f"{action}d {kind}") if action else None

    def on_batch(batch: list[Message]) -> None:
        nonlocal now
        if progress is not None:
            progress.add(len(batch))
        if out is not None:
            out.add([m.to_json() for m in batch])
        elif action is None:
            now = now or mq.now()
            for line in writer.lines(to_rows(batch, now)):
                click.echo(line)

    try:
        report = mq.gc(
            kind, queues=queues, older_than=older_than, action=action, notify=notify,
            on_batch=on_batch,
        )  # fmt: skip
    finally:
        if progress is not None:
            progress.close()
    if out is not None:
        out.close()
    elif action is None and not report.matched and not check:
        click.echo(f"no {kind} messages")
    _gc_summary(report, err=as_json)
    if report.notify_failed or (check and report.matched):
        _exit(1)


def _gc_summary(report: GcReport, err: bool) -> None:
    from mq_cli.core import render

    key = f"on_{report.kind}"  # the queue's on_stalled or on_failed
    for q in report.queues:
        if q.notify_error:
            error = render.error_line(q.notify_error, 300)
            click.echo(f"mq: queue {q.queue}: the {key} callback failed: {error}", err=True)
            if report.action:
                click.echo(
                    f"mq: its {q.matched} {report.kind} message(s) were left as they are "
                    "(the next run notifies again)",
                    err=True,
                )
            continue
        if report.action is None or not q.matched:
            continue
        verb = "requeued" if report.action == Action.REQUEUE else "deleted"
        line = f"queue {q.queue}: {verb} {q.changed} {report.kind} message(s)"
        if q.now_failed:
            line += f"; {q.now_failed} reached max_errors and are now failed"
        if q.matched > q.changed:
            line += f"; {q.matched - q.changed} changed meanwhile and were left alone"
        if report.action == Action.REQUEUE and report.kind == MessageState.STALLED and q.changed:
            # liveness.GRACE: a drain that was only cut off stops its handler first
            line += f"; ready in {liveness_grace():g} s"
        click.echo(line, err=err)


def liveness_grace() -> float:
    from mq_cli.backends.liveness import GRACE

    return GRACE


# -- list, show -----------------------------------------------------------------------


@cli.command("list")
@queue_option()
@click.option(
    "--status", type=click.Choice(STATES),
    help="Only messages in this state (as `mq stats` counts them).",
)  # fmt: skip
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
    help="Show at most N messages.",
)  # fmt: skip
@json_option
@pass_state
def list_(state: State, queue: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """A queue's messages (without -q: every queue's), oldest first, with their last error.

    The table shows each message's state as `mq stats` counts it: a processing
    message whose drain is gone (its lock is free, or its heartbeat is older
    than the queue's stalled_after) is `stalled`, a ready one not due yet
    (a retry's backoff, --delay) `delayed`; and the last line of last_error (where a traceback names the
    exception); `mq show ID` has everything. --json adds "state": ready,
    delayed, processing, stalled or failed ("status" is what is stored).

    \b
    Example:  mq list -q mail --status failed
              mq list -q thumbnails --limit 1000 --json | jq '.[].id'
    """
    from mq_cli.core import render

    if queue is not None:
        state.mq.require_known(queue)
    listing = state.mq.list_messages(queue, status, limit)
    if as_json:
        click.echo(json.dumps(listing.to_json()))
    elif listing.messages:
        click.echo(render.list_table(listing))
    else:
        where = f"in queue {queue}" if queue else "in any queue"
        click.echo(f"no {status + ' ' if status else ''}messages {where}")
    if listing.more:
        click.echo(f"mq: showing the oldest {limit}; there are more (raise --limit)", err=True)


@cli.command()
@click.argument("ident", metavar="ID", type=MessageId())
@json_option
@pass_state
def show(state: State, ident: int, as_json: bool) -> None:
    """One message: every field, last_error in full, and its payload.

    The payload shows as indented JSON, as text, or as a hex dump when it is
    binary. --json gives it as text if it is UTF-8, else base64 (with
    "payload_encoding": "base64") and "state", as `mq list --json`. An
    unknown id exits 1.

    \b
    Example:  mq show 1234
              mq show 1234 --json | jq -r .payload
    """
    from mq_cli.core import render

    message = state.mq.show(ident)
    now_state = state.mq.state(message)
    activity = state.mq.activity(message, now_state)
    if as_json:
        found = message.to_json(with_payload=True)
        found["state"] = now_state
        found["activity"], found["running_seconds"] = activity or (None, None)
        click.echo(json.dumps(found))
    else:
        click.echo(render.message_text(message, state.mq.now(), activity, now_state))


# -- retry, delete, purge ---------------------------------------------------------------

ids_argument = click.argument("ids", metavar="ID...", nargs=-1, required=True, type=MessageId())
force_option = click.option(
    "--force", is_flag=True, help="Also take a processing message from the drain holding it."
)


@cli.command()
@ids_argument
@force_option
@pass_state
def retry(state: State, ids: tuple[int, ...], force: bool) -> None:
    """Requeue messages now: ready, error count 0.

    A processing message is refused unless --force (its drain's result is then
    ignored). The others are requeued; refused and unknown ids are named on
    stderr, and then the exit status is 1.

    \b
    Example:  mq retry 1234 1235
              mq gc --errors -q mail --json | jq '.[].id' | xargs mq retry
    """
    _by_id(state, Action.RETRY, ids, force)


@cli.command()
@ids_argument
@force_option
@pass_state
def delete(state: State, ids: tuple[int, ...], force: bool) -> None:
    """Delete messages by id.

    A processing message is refused unless --force. The others are deleted;
    refused and unknown ids are named on stderr, and then the exit status is 1.

    \b
    Example:  mq delete 1234 1235
    """
    _by_id(state, Action.DELETE, ids, force)


def _by_id(state: State, action: Action, ids: tuple[int, ...], force: bool) -> None:
    result = state.mq.retry(ids, force) if action == Action.RETRY else state.mq.delete(ids, force)
    done, verb = ("requeued", Action.REQUEUE) if action == Action.RETRY else ("deleted", action)
    click.echo(f"{done} {len(result.done)} message(s)")
    for ident, owner in result.refused.items():
        click.echo(
            f"mq: message {ident} is processing (held by {owner}): not {done}; "
            f"add --force to {verb} it anyway",
            err=True,
        )
    for ident in result.missing:
        click.echo(f"mq: message {ident} not found (it succeeded, or never existed)", err=True)
    if result.refused or result.missing:
        _exit(1)


@cli.command()
@queue_option(required=True)
@click.option("--status", type=click.Choice(STATES), help=PURGE_STATUS)
@click.option("-y", "--yes", is_flag=True, help="Do not ask (needed when stdin is no terminal).")
@click.option("--force", is_flag=True, help="Delete processing messages too (maybe running).")
@pass_state
def purge(state: State, queue: str, status: str | None, yes: bool, force: bool) -> None:
    """Delete a queue's messages (or one state's); asks first.

    At a terminal it asks for confirmation; otherwise (cron, scripts) it needs
    --yes and, without it, exits 2 having deleted nothing. Only what exists
    when it starts is deleted, in batches of 1,000. With no --status the
    queue's unique-key tombstones (see unique_retention) go too. Processing
    and stalled messages may be running in a drain: they stay unless --force
    (those of dead drains: --status stalled). Each state means what `mq list
    --status` shows: ready never includes delayed.

    \b
    Example:  mq purge -q load-test
              mq purge -q mail --status failed --yes
              mq purge -q mail --status delayed --yes
    """
    what = f"{status} message(s)" if status else "message(s)"
    if status == MessageState.PROCESSING and not force:
        raise click.UsageError(
            "purge --status processing deletes messages drains may be running now: add "
            "--force (for messages of dead drains: mq gc --stalled --delete)"
        )
    state.mq.require_known(queue)
    if not yes:
        if not _stdin_is_terminal():
            raise click.UsageError(
                "purge deletes messages: add --yes (stdin is no terminal to ask)"
            )
        count = state.mq.count(queue, status) - (0 if status or force else _claimed(state, queue))
        click.confirm(f"Delete {count} {what} of queue {queue}?", abort=True)
    progress = Progress(f"deleting from {queue}")
    try:
        deleted = state.mq.purge(queue, status, on_progress=progress.add, force=force)
    finally:
        progress.close()
    click.echo(f"deleted {deleted} {what} from queue {queue}")
    if status is None and not force and (held := _claimed(state, queue)):
        click.echo(
            f"kept {held} processing message(s): a drain may be running them (--force deletes "
            "them too; those of dead drains: mq gc --stalled --delete)"
        )


def _claimed(state: State, queue: str) -> int:  # what a purge without --force keeps
    return sum(state.mq.count(queue, s) for s in (MessageState.PROCESSING, MessageState.STALLED))


# -- check ---------------------------------------------------------------------------


@cli.command()
@pass_state
def check(state: State) -> None:
    """Check a deployment: config, database, schema, handlers, lock directory.

    One line per check (ok / warn / FAIL); exits 1 if any check failed, an
    unreachable database included (a warning alone does not fail it). Run it
    after every deploy, and now and then: it also warns when the queue table
    has grown in a way that costs (dead rows, free space, stale statistics),
    naming the command that fixes it. It changes nothing: a missing lock
    directory is reported (the first drain creates it), not created.

    \b
    Example:  mq check
              mq -c /etc/mq/config.yaml check && echo deployed
    """
    from mq_cli.ops.checks import run_checks

    results = run_checks(state.config_path, state.database_url)
    width = max(len(r.name) for r in results)
    for r in results:
        status = "FAIL" if not r.ok else "warn" if r.warn else "ok  "
        click.echo(f"{status}  {r.name.ljust(width)}  {r.detail}")
    if not all(r.ok for r in results):
        _exit(1)
