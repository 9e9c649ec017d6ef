"""`mq status --html FILE`: one self-contained page (inline CSS and SVG, no script).

Every text that comes from the database or a handler (queue names, hosts,
errors) goes through :func:`html.escape`. The page is written atomically
(temp file + rename), so a web server never serves half of it. Each write also
stores one backlog sample per queue in the run log, which the backlog plot
draws: a cron line that refreshes the page every minute fills it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from mq_cli.core import atomic
from mq_cli.core.errors import MqError
from mq_cli.core.models import Message
from mq_cli.core.render import error_line
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

Series = list[tuple[float, int, int, int | None]]  # (step start, done, failed, backlog)


@dataclass
class Page:
    status: Status
    failed: list[Message]
    stalled: list[Message]
    series: dict[str, Series]
    retention: float


def gather(mq: Reader, backend: Backend, status: Status) -> Page:
    """What the page shows beyond the status; records this moment's backlog."""
    failed: list[Message] = []
    stalled: list[Message] = []
    for name, q in status.queues.items():
        if q.stats.failed and len(failed) < MESSAGES_MAX:
            failed += backend.find_failed(name, None, MESSAGES_PER_QUEUE)
        if q.stats.stalled and len(stalled) < MESSAGES_MAX:
            after = mq.queue(name).stalled_after
            stalled += backend.find_stalled(name, after, None, MESSAGES_PER_QUEUE)
    samples = [
        (None, name, status.now, status.now, 0, 0, q.stats.ready, 0.0, 0.0, "", "")
        for name, q in status.queues.items()
    ]
    try:
        backend.rollup_add(samples)
    except MqError as exc:  # a read-only user still gets its page
        log.warning("status: could not record the backlog sample (%s)", exc)
    retention = mq.config.run_log_retention or 86400.0
    since = status.now - retention
    raw = backend.rollup_series(60.0, since)
    series = {name: _coarser(points, status.now) for name, points in raw.items()}
    return Page(status, failed[:MESSAGES_MAX], stalled[:MESSAGES_MAX], series, retention)


def _coarser(points: Series, now: float) -> Series:
    """At most POINTS points from the first to now: sums of done and failed, the
    largest backlog."""
    if not points:
        return []
    start = points[0][0]
    step = max(60.0, (now - start) / POINTS)
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
svg{display:block}
"""


def render(page: Page) -> str:
    status = page.status
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width">',
        "<title>mq status</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>mq status</h1>",
        f'<p class="muted">as of {_e(iso(status.now))} (the database\'s clock); '
        f"run log kept for {_e(seconds_text(page.retention))}</p>",
        _queues(status),
        _plots(page),
        _drains(status),
        _messages("Failed messages", page.failed, status.now),
        _messages("Stalled messages", page.stalled, status.now),
        _runs(status),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _table(headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _queues(status: Status) -> str:
    rows = []
    for name, q in status.queues.items():
        s = q.stats
        wait = q.hour.quantiles("wait")
        took = q.hour.quantiles("duration")
        label = _e(name) + (' <span class="paused">(paused)</span>' if s.paused else "")
        label += "".join(f'<br><span class="muted">{_e(line)}</span>' for line in q.limits.lines())
        rows.append([
            label, _e(s.ready), _e(s.delayed), _e(s.processing), _e(s.stalled), _e(s.failed),
            _e(seconds_text(s.oldest_ready_seconds)),
            _e(f"{q.minute.done} / {q.minute.failed}"), _e(f"{q.hour.done} / {q.hour.failed}"),
            _e(f"{seconds_text(wait['p50'])} / {seconds_text(wait['p95'])}"),
            _e(f"{seconds_text(took['p50'])} / {seconds_text(took['p95'])}"),
        ])  # fmt: skip
    headers = ["queue", "ready", "delayed", "processing", "stalled", "failed", "backlog age",
               "done / failed 1 min", "done / failed 1 h", "wait p50 / p95", "run p50 / p95"]  # fmt: skip
    return "<h2>Queues</h2>" + _table(headers, rows, "no queue configured or stored")


def _drains(status: Status) -> str:
    rows = [[_e(cell) for cell in status.drain_row(run)] for run in status.drains]
    headers = ["drain", "queue", "running for", "message now", "held", "done", "failed"]
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
    headers = ["queue", "drain", "started", "took", "claimed", "done", "failed", "returned",
               "exit"]  # fmt: skip
    return "<h2>Recent runs</h2>" + _table(headers, rows, "no run recorded")


def _messages(title: str, messages: list[Message], now: float) -> str:
    rows = [
        [_e(m.id), _e(m.queue), _e(m.error_count), _e(iso(m.created_at.timestamp())),
         f'<div class="err">{_e(error_line(m.last_error, ERROR_WIDTH))}</div>']
        for m in messages
    ]  # fmt: skip
    headers = ["id", "queue", "errors", "created", "last error"]
    note = f" (at most {MESSAGES_PER_QUEUE} per queue)" if messages else ""
    return f"<h2>{_e(title)}{_e(note)}</h2>" + _table(headers, rows, "none")


def _plots(page: Page) -> str:
    if not page.series:
        return '<h2>History</h2><p class="muted">nothing recorded yet</p>'
    figures = []
    for name, points in sorted(page.series.items()):
        done = [(at, float(d)) for at, d, _, _ in points]
        failed = [(at, float(f)) for at, _, f, _ in points]
        backlog = [(at, float(b)) for at, _, _, b in points if b is not None]
        figures.append(
            f"<figure><figcaption>{_e(name)}: done (blue), failed (red)</figcaption>"
            f"{_svg([('#2364aa', done), ('#c0392b', failed)], page.status.now)}</figure>"
        )
        figures.append(
            f"<figure><figcaption>{_e(name)}: backlog (ready)</figcaption>"
            f"{_svg([('#7a5195', backlog)], page.status.now)}</figure>"
        )
    return '<h2>History</h2><div class="plots">' + "".join(figures) + "</div>"


def _svg(lines: list[tuple[str, list[tuple[float, float]]]], now: float) -> str:
    width, height, pad = 360, 120, 24
    points = [p for _, series in lines for p in series]
    if not points:
        return f'<svg width="{width}" height="{height}"><text x="8" y="20">no samples</text></svg>'
    start = min(at for at, _ in points)
    span = max(now - start, 60.0)
    top = max(max(v for _, v in points), 1.0)

    def xy(at: float, value: float) -> str:
        x = pad + (at - start) / span * (width - 2 * pad)
        y = height - pad - value / top * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    body = [
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#999"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>',
        f'<text x="2" y="{pad - 6}" font-size="10">{_e(f"{top:g}")}</text>',
        f'<text x="{pad}" y="{height - 6}" font-size="10">{_e(iso(start))}</text>',
        f'<text x="{width - pad}" y="{height - 6}" font-size="10" text-anchor="end">now</text>',
    ]
    for colour, series in lines:
        if not series:
            continue
        coords = " ".join(xy(at, v) for at, v in series)
        if len(series) == 1:
            x, y = coords.split(",")
            body.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>')
        else:
            body.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'
            )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">' + "".join(body) + "</svg>"
    )


def write(path: str, text: str) -> None:
    """Replace ``path`` atomically: a reader sees the old page or the new one."""
    atomic.write(path, text, prefix=".mq-status-")
