"""Durations as the config and the CLI write them: ``30``, ``500ms``, ``30s``, ``5m``, ``1h``,
``2d``, and compounds of them largest unit first (``1h30m``, ``2d4h``, ``1m30s``): what
:func:`format_duration` prints can be given back."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII only: \d and \s would accept Arabic-Indic digits and no-break spaces.
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.ASCII)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", re.ASCII)
_COMPOUND = re.compile(r"^\s*(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+\s*$", re.ASCII)
_ORDER = ("d", "h", "m", "s", "ms")
# Far past any sensible delay or timeout, and far inside what DATETIME and
# SQLite's date functions can add to now (else the insert fails as a database error).
_MAX_SECONDS = 36500 * 86400.0


def _bounded(seconds: float, value: object) -> float:
    # YAML reads .nan and .inf as floats; nan fails every comparison, so test for it.
    if not math.isfinite(seconds) or seconds > _MAX_SECONDS:
        raise ValueError(f"expected a duration of at most 36500d (100 years), got {value!r}")
    return seconds


def parse_duration(value: object) -> float:
    """Seconds for ``value``; raises ValueError with a readable reason."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
        return _bounded(seconds, value)
    if isinstance(value, str):
        match = _PATTERN.fullmatch(value)
        if match:
            return _bounded(float(match.group(1)) * _UNITS[match.group(2) or "s"], value)
        if _COMPOUND.fullmatch(value):
            parts = _PART.findall(value)
            ranks = [_ORDER.index(unit) for _, unit in parts]
            if ranks == sorted(set(ranks)):  # each unit once, largest first: 1h30m, not 30m1h
                return _bounded(sum(float(n) * _UNITS[unit] for n, unit in parts), value)
    raise ValueError(
        f"expected a duration such as 30 (seconds), 500ms, 30s, 5m, 1h, 2d or 1h30m, got {value!r}"
    )


def format_duration(seconds: float | None) -> str:
    """A short human form: ``45s``, ``12m``, ``3h5m``, ``2d4h``."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
