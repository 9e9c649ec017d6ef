"""The status page's plots: inline SVG step plots, drawn up to now.

A value holds from its sample until the next one (a horizontal segment, then a
vertical one), and the last value holds until now, the right edge. Both axes
say what they count and in what unit; the y axis has ticks at 0 and at a round
maximum, the x axis at round times before now ("-30 min", "now").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

#: the plot's size in pixels, and its margins: left for the y ticks and label,
#: bottom for the x ticks and label
WIDTH, HEIGHT = 420, 170
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 12, 40
#: a plot spans at least this many seconds, so that a fresh run log has sensible ticks
MIN_SPAN = 600.0
#: minutes between x ticks, the first that leaves at most X_TICKS intervals
TICK_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 4320, 10080, 20160)
X_TICKS = 4


@dataclass
class Line:
    """One series: (from, value) pairs in time order; each value holds until the next."""

    name: str
    colour: str
    points: list[tuple[float, float]]


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def round_max(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value`` (> 0)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value * (1 - 1e-9):
            return float(f"{factor * power:.12g}")
    return 10 * power  # not reached


def ago(minutes: int) -> str:
    """A tick's label: ``-30 min``, ``-6 h``, ``-2 d``."""
    if minutes >= 2880 and minutes % 1440 == 0:
        return f"-{minutes // 1440} d"
    if minutes >= 120 and minutes % 60 == 0:
        return f"-{minutes // 60} h"
    return f"-{minutes} min"


def number(value: float) -> str:
    return f"{value:g}"


def step_plot(lines: list[Line], start: float, now: float, y_label: str) -> str:
    """An SVG of ``lines`` from ``start`` (or MIN_SPAN before now) to ``now``."""
    span = max(now - start, MIN_SPAN)
    first = now - span
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    values = [v for line in lines for _, v in line.points]
    top = round_max(max(values, default=0.0))

    def x(at: float) -> float:
        return LEFT + min(max((at - first) / span, 0.0), 1.0) * (right - LEFT)

    def y(value: float) -> float:
        return bottom - min(max(value / top, 0.0), 1.0) * (bottom - TOP)

    body = []
    ticks = [0.0, top / 2, top] if (top / 2).is_integer() else [0.0, top]
    for value in ticks:
        at = y(value)
        body.append(
            f'<line x1="{LEFT}" y1="{at:.1f}" x2="{right}" y2="{at:.1f}" stroke="#e4e4e4"/>'
            f'<text class="ytick" x="{LEFT - 4}" y="{at + 3.5:.1f}" font-size="10" '
            f'text-anchor="end">{_e(number(value))}</text>'
        )
    step = next((m for m in TICK_MINUTES if span / (m * 60) <= X_TICKS), TICK_MINUTES[-1])
    k = 0
    while k * step * 60 <= span + 1e-6:
        at = x(now - k * step * 60)
        label = "now" if k == 0 else ago(k * step)
        body.append(
            f'<line x1="{at:.1f}" y1="{bottom}" x2="{at:.1f}" y2="{bottom + 4}" stroke="#999"/>'
            f'<text class="xtick" x="{at:.1f}" y="{bottom + 15}" font-size="10" '
            f'text-anchor="{"end" if k == 0 else "middle"}">{_e(label)}</text>'
        )
        k += 1
    body.append(
        f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#999"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#999"/>'
        f'<text class="xlabel" x="{(LEFT + right) / 2:.0f}" y="{HEIGHT - 6}" font-size="11" '
        'text-anchor="middle">time before now</text>'
        f'<text class="ylabel" transform="translate(14 {(TOP + bottom) / 2:.0f}) rotate(-90)" '
        f'font-size="11" text-anchor="middle">{_e(y_label)}</text>'
    )
    for line in lines:
        if line.points:
            body.append(
                f'<path class="step" d="{_steps(line.points, x, y, right)}" fill="none" '
                f'stroke="{_e(line.colour)}" stroke-width="2"><title>{_e(line.name)}</title></path>'
            )
    if not any(line.points for line in lines):
        body.append(
            f'<text x="{(LEFT + right) / 2:.0f}" y="{(TOP + bottom) / 2:.0f}" font-size="11" '
            'text-anchor="middle" fill="#777">no samples</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">' + "".join(body) + "</svg>"
    )


def _steps(
    points: list[tuple[float, float]],
    x: Callable[[float], float],
    y: Callable[[float], float],
    right: float,
) -> str:
    """``M`` at the first point, then for each next one across (``H``) and up or down
    (``V``), and across to the right edge: the last value holds until now."""
    at, held = points[0]
    parts = [f"M{x(at):.1f} {y(held):.1f}"]
    for at, value in points[1:]:
        if value != held:  # the same value again: the line just goes on
            parts.append(f"H{x(at):.1f}V{y(value):.1f}")
            held = value
    parts.append(f"H{right:.1f}")
    return "".join(parts)
