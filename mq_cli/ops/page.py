"""`mq status --html FILE`: one self-contained page (inline CSS and SVG, no script).

Read at a glance: it reloads itself (a meta refresh), each queue has a health
colour and word (health.py) with the commands that repair its problems, and
the plots (plots.py) are step plots up to now. Every text that comes from the
database or a handler (queue names, hosts, errors) goes through
:func:`html.escape`. The page is written atomically (temp file + rename), so a
web server never serves half of it. Each write also stores one backlog sample
per queue in the run log, which the backlog plot draws: a cron line that
refreshes the page every minute fills it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from html import escape
from typing import TYPE_CHECKING

from mq_cli.core import atomic
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import MqError
from mq_cli.core.models import Message
from mq_cli.core.render import error_line
from mq_cli.core.states import STATES, Outcome, State
from mq_cli.ops import health, plots
from mq_cli.ops.status import Reader, Status, iso, seconds_text

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend

log = logging.getLogger("mq")

#: failed and stalled messages listed per queue, and in all
MESSAGES_PER_QUEUE = 10
MESSAGES_MAX = 50
#: points per plot at most
POINTS = 120
ERROR_WIDTH = 300
#: seconds between the page's reloads in a browser (`mq status --refresh`): the
#: cron line's minute
REFRESH = 60

Series = list[tuple[float, int, int, int | None]]  # (step start, done, failed, backlog)


@dataclass
class Page:
    status: Status
    failed: list[Message]
    stalled: list[Message]
    series: dict[str, Series]
    retention: float
    #: the plots' first moment and the seconds each point spans
    start: float = 0.0
    step: float = 60.0


def gather(mq: Reader, backend: Backend, status: Status) -> Page:
    """What the page shows beyond the status; records this moment's backlog."""
    from mq_cli.ops import operate

    failed: list[Message] = []
    stalled: list[Message] = []
    for name, q in status.queues.items():
        if q.stats.failed and len(failed) < MESSAGES_MAX:
            failed += backend.find_failed(name, None, MESSAGES_PER_QUEUE)
        if q.stats.stalled and len(stalled) < MESSAGES_MAX:
            # as `mq list` tells them: a killed drain's messages (free lock) too
            listing = operate.list_messages(
                mq.config, backend, name, State.STALLED, MESSAGES_PER_QUEUE
            )
            stalled += listing.messages
    samples = [
        (None, name, status.now, status.now, 0, 0, q.stats.ready, 0.0, 0.0, "", "")
        for name, q in status.queues.items()
    ]
    try:
        backend.rollup_add(samples)
    except MqError as exc:  # a read-only user still gets its page
        log.warning("status: could not record the backlog sample (%s)", exc)
    series, retention, start, step = history(mq, backend, status.now)
    return Page(
        status, failed[:MESSAGES_MAX], stalled[:MESSAGES_MAX], series, retention, start, step
    )


def history(
    mq: Reader, backend: Backend, now: float
) -> tuple[dict[str, Series], float, float, float]:
    """(series per queue, the run log's retention, the plots' first moment, seconds per
    point): what the plots draw, read only."""
    retention = mq.config.run_log_retention or 86400.0
    raw = backend.rollup_series(60.0, now - retention)
    start = min((points[0][0] for points in raw.values() if points), default=now)
    step = max(60.0, (now - start) / POINTS)
    return {name: _coarser(p, start, step) for name, p in raw.items()}, retention, start, step


def _coarser(points: Series, start: float, step: float) -> Series:
    """Points ``step`` apart from ``start`` (every queue's the same): sums of done and
    failed, the largest backlog."""
    merged: dict[int, list] = {}
    for at, done, failed, backlog in points:
        slot = merged.setdefault(int((at - start) // step), [0, 0, None])
        slot[0] += done
        slot[1] += failed
        if backlog is not None:
            slot[2] = backlog if slot[2] is None else max(slot[2], backlog)
    return [(start + i * step, d, f, b) for i, (d, f, b) in sorted(merged.items())]


# -- the page -----------------------------------------------------------------

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.3em 0}td,th{padding:.2em .7em;border-bottom:1px solid #ddd;
text-align:right;vertical-align:top}th{background:#f0f3f7}td:first-child,th:first-child{text-align:left}
.err{font-family:monospace;text-align:left;white-space:pre-wrap;max-width:50em;color:#900}
.muted{color:#777}.paused{color:#b60}.plots{display:flex;flex-wrap:wrap;gap:1.2em}
figure{margin:0;border:1px solid #ddd;padding:.4em}figcaption{font-weight:600}
svg{display:block}.sw{display:inline-block;width:.8em;height:.8em;margin:0 .2em 0 .5em}
.badge{display:inline-block;padding:0 .55em;border-radius:.8em;font-weight:600;font-size:.9em}
.badge.red{background:#b3261e;color:#fff}.badge.amber{background:#f2b01e;color:#222}
.badge.green{background:#2e7d32;color:#fff}
tr.health-red>td{background:#fdecea}tr.health-amber>td{background:#fff5dc}
tr.fix>td{text-align:left}tr.fix ul{margin:0;padding-left:1.2em}
code{font-family:monospace;background:#eef0f3;padding:0 .3em;white-space:nowrap;user-select:all}
td.health{text-align:center}
"""


def render(page: Page, refresh: int = REFRESH) -> str:
    """The page; a browser reloads it every ``refresh`` seconds (0: never)."""
    status = page.status
    again = (
        f"reloads every {_e(seconds_text(refresh))}" if refresh > 0 else "does not reload itself"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh > 0 else "",
        '<meta name="viewport" content="width=device-width">',
        "<title>mq status</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>mq status</h1>",
        f'<p class="muted">as of {_e(iso(status.now))} (the database\'s clock); '
        f"run log kept for {_e(seconds_text(page.retention))}; this page {again}</p>",
        _queues(status),
        _plots(page),
        _drains(status),
        _messages("Failed messages", page.failed, status, stalled=False),
        _messages("Stalled messages", page.stalled, status, stalled=True),
        _runs(status),
        "</body></html>",
    ]
    return "\n".join(part for part in parts if part) + "\n"


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _table(headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _badge(level: str) -> str:
    return f'<span class="badge {level}">{_e(health.WORDS[level])}</span>'


def _code(command: str) -> str:
    return f"<code>{_e(command)}</code>"


def _queues(status: Status) -> str:
    headers = ["queue", "health", *STATES,
               "backlog age", "done / failed 1 min", "done / failed 1 h", "wait p50 / p95",
               "run p50 / p95"]  # fmt: skip
    rows, count = [], {health.RED: 0, health.AMBER: 0, health.GREEN: 0}
    for name, q in status.queues.items():
        s = q.stats
        judged = health.judge(name, q)
        count[judged.level] += 1
        wait = q.hour.quantiles("wait")
        took = q.hour.quantiles("duration")
        label = _e(name) + (' <span class="paused">(paused)</span>' if s.paused else "")
        notes = replace(q.limits, cannot_start=None).lines()  # that one is a problem below
        label += "".join(f'<br><span class="muted">{_e(line)}</span>' for line in notes)
        cells = [
            label, _badge(judged.level), _e(s.ready), _e(s.delayed), _e(s.processing),
            _e(s.stalled), _e(s.failed), _e(seconds_text(s.oldest_ready_seconds)),
            _e(f"{q.minute.done} / {q.minute.failed}"), _e(f"{q.hour.done} / {q.hour.failed}"),
            _e(f"{seconds_text(wait['p50'])} / {seconds_text(wait['p95'])}"),
            _e(f"{seconds_text(took['p50'])} / {seconds_text(took['p95'])}"),
        ]  # fmt: skip
        tr = f'<tr class="health-{judged.level}" data-queue="{_e(name)}">'
        tds = [
            f'<td class="health">{c}</td>' if i == 1 else f"<td>{c}</td>"
            for i, c in enumerate(cells)
        ]
        rows.append(tr + "".join(tds) + "</tr>")
        if judged.problems:
            items = "".join(_problem(p) for p in judged.problems)
            rows.append(
                f'<tr class="fix health-{judged.level}"><td colspan="{len(headers)}">'
                f"<ul>{items}</ul></td></tr>"
            )
    if not rows:
        return '<h2>Queues</h2><p class="muted">no queue configured or stored</p>'
    summary = ", ".join(  # red, amber, green
        f"{_badge(level)} {n} queue{'' if n == 1 else 's'}" for level, n in count.items() if n
    )
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    legend = (
        f'<p class="muted">{_e(health.WORDS[health.RED])}: failed or stalled messages, or '
        f"drains that cannot start the queue; {_e(health.WORDS[health.AMBER])}: paused, or the "
        f"oldest ready message waited more than {_e(format_duration(health.BACKLOG_AGE))}; "
        f"{_e(health.WORDS[health.GREEN])}: neither. Run the repair commands with the config "
        "and database of the cron line that writes this page.</p>"
    )
    return (
        f"<h2>Queues</h2><p>{summary}</p><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>{legend}"
    )


def _problem(problem: health.Problem) -> str:
    repairs = "; ".join(f"{_code(command)} {_e(does)}" for command, does in problem.repairs)
    return f"<li><strong>{_e(problem.what)}</strong>: {repairs}</li>"


def _drains(status: Status) -> str:
    rows = [[_e(cell) for cell in status.drain_row(run)] for run in status.drains]
    headers = ["drain", "queue", "running for", "message now", "held", Outcome.DONE, Outcome.FAILED]
    return "<h2>Live drains</h2>" + _table(headers, rows, "no drain running")


def _runs(status: Status) -> str:
    rows = []
    for run in status.runs:
        data = status.run_json(run)
        rows.append([
            _e(",".join(run.queues) or run.queue), _e(f"{run.host}:{run.pid}"),
            _e(data["started_at"]), _e(seconds_text(data["seconds"])), _e(run.claimed),
            _e(run.succeeded), _e(run.failed), _e(run.returned),
            _e(data["state"] if run.exit_code is None else run.exit_code),
        ])  # fmt: skip
    headers = ["queue", "drain", "started", "took", "claimed", Outcome.DONE, Outcome.FAILED,
               "returned", "exit"]  # fmt: skip
    return "<h2>Recent runs</h2>" + _table(headers, rows, "no run recorded")


def _messages(title: str, messages: list[Message], status: Status, stalled: bool) -> str:
    # A stalled message is still `processing`: retry takes it only with --force.
    retry = "mq retry --force" if stalled else "mq retry"
    drains = {run.owner: f"{run.host}:{run.pid}" for run in [*status.runs, *status.drains]}
    rows = []
    for m in messages:
        row = [_e(m.id), _e(m.queue), _e(m.error_count), _e(iso(m.created_at.timestamp()))]
        if stalled:
            beat = m.heartbeat_at.timestamp() if m.heartbeat_at else None
            row += [
                _e(drains.get(m.owner or "", m.owner or "-")),
                _e("-" if beat is None else f"{format_duration(status.now - beat)} ago"),
            ]
        error = error_line(m.last_error, ERROR_WIDTH) if m.last_error else "none recorded"
        row.append(f'<div class="err">{_e(error)}</div>')
        repair = f"{_code(f'mq show {m.id}')}<br>{_code(f'{retry} {m.id}')}"
        row.append(repair)
        rows.append(row)
    headers = ["id", "queue", "errors", "created"]
    headers += ["drain", "last heartbeat"] if stalled else []
    headers += ["last error", "look / run again"]
    note = f" (at most {MESSAGES_PER_QUEUE} per queue)" if messages else ""
    return f"<h2>{_e(title)}{_e(note)}</h2>" + _table(headers, rows, "none")


def _plots(page: Page) -> str:
    if not page.series:
        return '<h2>History</h2><p class="muted">nothing recorded yet</p>'
    now, step = page.status.now, page.step
    figures = []
    for name, points in sorted(page.series.items()):
        done = rates([(at, d) for at, d, _, _ in points], step, now)
        failed = rates([(at, f) for at, _, f, _ in points], step, now)
        backlog = plots.Line(
            State.READY, "#7a5195", [(at, float(b)) for at, _, _, b in points if b is not None]
        )
        lines = [
            plots.Line(Outcome.DONE, "#2364aa", done),
            plots.Line(Outcome.FAILED, "#c0392b", failed),
        ]
        figures.append(
            _figure(name, "done and failed", lines, page.start, now, "messages per minute")
        )
        figures.append(_figure(name, "backlog", [backlog], page.start, now, "messages (ready)"))
    return (
        '<h2>History</h2><p class="muted">each value holds until the next sample; '
        f"one point per {_e(format_duration(page.step))}</p>"
        '<div class="plots">' + "".join(figures) + "</div>"
    )


def _figure(
    name: str, what: str, lines: list[plots.Line], start: float, now: float, y_label: str
) -> str:
    legend = "".join(
        f'<span class="sw" style="background:{line.colour}"></span>{_e(line.name)}'
        for line in lines
    )
    return (
        f"<figure><figcaption>{_e(name)}: {_e(what)}{legend}</figcaption>"
        f"{plots.step_plot(lines, start, now, y_label)}</figure>"
    )


def rates(counts: list[tuple[float, int]], step: float, now: float) -> list[tuple[float, float]]:
    """Counts per ``step`` as messages per minute, each held for its step, and 0 where
    no result was recorded (a gap, or after the last step)."""
    found: list[tuple[float, float]] = []
    for i, (at, count) in enumerate(counts):
        found.append((at, count * 60.0 / step))
        following = counts[i + 1][0] if i + 1 < len(counts) else now
        if at + step < following:
            found.append((at + step, 0.0))
    return found


def write(path: str, text: str) -> None:
    """Replace ``path`` atomically: a reader sees the old page or the new one."""
    atomic.write(path, text, prefix=".mq-status-")


_rates = rates  # the name the tests know
