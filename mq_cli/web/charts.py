"""The overview's plots: the status page's SVG step plots (ops/plots.py), per queue.

The series are those `mq status --html` draws (ops/page.history); the legend's
colour swatches are classes of the console's stylesheet, since its CSP allows
no inline style.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from mq_cli.core.states import Outcome, State
from mq_cli.ops import plots
from mq_cli.ops.page import rates

#: colour of each line, and the legend class of the same colour (static/console.css)
COLOURS = {Outcome.DONE: "#2364aa", Outcome.FAILED: "#c0392b", State.READY: "#7a5195"}


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
            plots.Line(Outcome.DONE, COLOURS[Outcome.DONE], done),
            plots.Line(Outcome.FAILED, COLOURS[Outcome.FAILED], failed),
        ]
        found.append(Figure(
            name, "done and failed", [Outcome.DONE, Outcome.FAILED],
            Markup(plots.step_plot(lines, start, now, "messages per minute")),
        ))  # fmt: skip
        found.append(Figure(
            name, "backlog", [State.READY],
            Markup(plots.step_plot([plots.Line(State.READY, COLOURS[State.READY], backlog)], start, now,
                                   "messages (ready)")),
        ))  # fmt: skip
    return found
