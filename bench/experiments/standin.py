"""The experiments' stand-in for a drain's Python per message: ``work(rounds)``
additions, and what they cost here (each experiment prints it beside its figures).
Imported by its neighbours, which run as scripts from this folder."""

from __future__ import annotations

import os
import time


def work(rounds: int) -> int:
    total = 0
    for i in range(rounds):
        total += i
    return total


def work_line(rounds: int, what: str = "Python work per message") -> str:
    """``what``: the µs that ``work(rounds)`` takes on this machine now, and the load."""
    started = time.perf_counter()
    for _ in range(1000):
        work(rounds)
    per_message = (time.perf_counter() - started) / 1000 * 1e6
    return f"{what}: {per_message:.1f} µs; load {os.getloadavg()[0]:.1f}"
