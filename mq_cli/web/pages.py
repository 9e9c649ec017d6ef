"""The console's pages: the overview, a queue, a message, the run log, the actions record.

The overview and the queue page put what changes in one element that the
page's script (static/console.js) fetches again every few seconds with
``?fragment=1``: the filter stays in the address and the selection in the
page, so neither is lost. Everything shown is escaped by Jinja's autoescape.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, render_template, request
from markupsafe import Markup

from mq_cli.backends.counts import ESTIMATE_ABOVE
from mq_cli.core.durations import format_duration
from mq_cli.core.models import STATES, QueueStats, iso
from mq_cli.core.render import error_line, payload_view
from mq_cli.core.states import State
from mq_cli.ops import health
from mq_cli.ops.browse import Filter
from mq_cli.ops.columns import columns
from mq_cli.ops.status import iso as iso_seconds
from mq_cli.ops.status import seconds_text
from mq_cli.web import charts
from mq_cli.web.context import console, mq
from mq_cli.web.find import reader
from mq_cli.web.inputs import whole

blueprint = Blueprint("pages", __name__)
#: messages per queue page
PAGE_SIZE = 50
#: seconds between a live page's refreshes
REFRESH = 5


def count(stats: QueueStats, name: str) -> Markup:
    """A count as the pages show it: an estimate (above backends/counts.ESTIMATE_ABOVE,
    read in bounded time) is marked "~", with a title that says so."""
    value = getattr(stats, name)
    if name not in stats.estimated:
        return Markup(str(int(value)))
    return Markup('<abbr class="estimate" title="{}">~{}</abbr>').format(ESTIMATED, f"{value:,}")


#: what a "~" count is
ESTIMATED = (
    f"an estimate: above {ESTIMATE_ABOVE:,} the console samples the table; mq stats counts exactly"
)


def _live(template: str, partial: str, **context: Any) -> str:
    """The whole page, or (``?fragment=1``, the script's refresh) only what changes."""
    context.update(refresh=REFRESH, seconds_text=seconds_text, iso=iso, iso_seconds=iso_seconds)
    context.update(count=count, estimated=ESTIMATED)
    if request.args.get("fragment") == "1":
        return render_template(partial, **context)
    return render_template(template, partial=partial, **context)


@blueprint.get("/")
def overview() -> str:
    status = mq().status(estimate=True)
    history, retention, start, step = mq().history(status.now)
    queues = []
    for name, q in status.queues.items():
        judged = health.judge(name, q)
        queues.append({
            "name": name, "q": q, "health": judged, "wait": q.hour.quantiles("wait"),
            "took": q.hour.quantiles("duration"), "limits": q.limits.lines(),
        })  # fmt: skip
    plots = charts.figures(history, start, status.now, step, status.queues)
    return _live(
        "overview.html", "_overview.html", status=status, queues=queues, plots=plots,
        words=health.WORDS, step=format_duration(step), retention=seconds_text(retention),
    )  # fmt: skip


def current_filter() -> Filter:
    """The queue page's filter, from the address (a GET) or the form (a POST)."""
    values = request.values
    raw = values.get("state") or None
    state = None if raw is None else State.parse(raw, "state")
    return Filter(state, values.get("error") or None, values.get("key") or None)


def cursor(name: str = "after") -> int:
    """A page's keyset cursor: the last id of the page before (0: the first page)."""
    return whole(name, request.values.get(name, "0") or "0", low=0)


@blueprint.get("/queues/<queue>")
def queue(queue: str) -> str:
    stats = mq().stats(queue, estimate=True)[queue]
    # counted once: require_known would count an unconfigured queue again
    mq().require_known(queue, traces=stats.paused or stats != type(stats)())
    chosen = current_filter()
    after = cursor()
    page = mq().browse(queue, chosen, after, PAGE_SIZE)
    more = columns(reader(), page.messages, page.states)  # preview, next retry, failed at
    rows = [
        {
            "m": m, "state": page.states[m.id], "activity": page.activity.get(m.id),
            "error": error_line(m.last_error, 160) if m.last_error else "", "more": more[m.id],
        }
        for m in page.messages
    ]  # fmt: skip
    return _live(
        "queue.html", "_queue.html", queue=queue, chosen=chosen, after=after, page=page,
        rows=rows, stats=stats, states=STATES, now=mq().now(),
    )  # fmt: skip


@blueprint.get("/messages/<int:ident>")
def message(ident: int) -> str:
    found = mq().show(ident)
    state = mq().state(found)
    activity = mq().activity(found, state)
    view = request.args.get("view", "auto")
    if view not in ("auto", "text", "hex"):
        abort(400, "view is auto, text or hex")
    payload = found.payload or b""
    if view == "hex":
        from mq_cli.core.render import hexdump

        kind, shown = "binary, hex dump", hexdump(payload)
    elif view == "text":
        kind, shown = "text", payload.decode("utf-8", "replace")
    else:
        kind, shown = payload_view(payload)
    status = mq().status(found.queue, estimate=True)
    runs = [
        r for r in [*status.drains, *status.runs]
        if r.owner == found.owner or r.running_id == found.id
    ]  # fmt: skip
    return render_template(
        "message.html", m=found, state=state, activity=activity, kind=kind, shown=shown,
        view=view, runs=list({r.id: r for r in runs}.values()), status=status, iso=iso,
        seconds_text=seconds_text, size=len(payload),
    )  # fmt: skip


@blueprint.get("/runs")
def runs() -> str:
    status = mq().status(estimate=True)
    return render_template(
        "runs.html", status=status, runs=[(r, status.run_json(r)) for r in status.runs],
        drains=[status.drain_row(r) for r in status.drains], seconds_text=seconds_text,
    )  # fmt: skip


@blueprint.get("/actions")
def audit() -> str:
    return render_template("audit.html", entries=console().audit.newest())
