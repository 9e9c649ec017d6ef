"""The overview's plots: the status page's SVG step plots (ops/plots.py), per queue.

The series are those `mq status --html` draws (ops/page.history); the legend's
colour swatches are classes of the console's stylesheet, since its CSP allows
no inline style.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from mq_cli.ops import plots
from mq_cli.ops.page import rates

#: colour of each line, and the legend class of the same colour (static/console.css)
COLOURS = {"done": "#2364aa", "failed": "#c0392b", "ready": "#7a5195"}


@dataclass
class Figure:
    queue: str
    what: str
    legend: list[str]  # line names, each with a swatch class "sw-NAME"
    svg: Markup


def figures(
    history: dict[str, Any], start: float, now: float, step: float, queues: dict[str, Any]
) -> list[Figure]:
    """Two plots a queue: done and failed per minute, and the ready backlog."""
    found = []
    for name in sorted(set(history) | set(queues)):
        points = history.get(name, [])
        done = rates([(at, d) for at, d, _, _ in points], step, now)
        failed = rates([(at, f) for at, _, f, _ in points], step, now)
        backlog = [(at, float(b)) for at, _, _, b in points if b is not None]
        lines = [
            plots.Line("done", COLOURS["done"], done),
            plots.Line("failed", COLOURS["failed"], failed),
        ]
        found.append(Figure(
            name, "done and failed", ["done", "failed"],
            Markup(plots.step_plot(lines, start, now, "messages per minute")),
        ))  # fmt: skip
        found.append(Figure(
            name, "backlog", ["ready"],
            Markup(plots.step_plot([plots.Line("ready", COLOURS["ready"], backlog)], start, now,
                                   "messages (ready)")),
        ))  # fmt: skip
    return found
