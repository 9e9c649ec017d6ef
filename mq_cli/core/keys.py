"""The queue keys of the configuration: each one's parser and check (they name
what is wrong; config.py adds the key and the file's line).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


from mq_cli.core.durations import parse_duration
from mq_cli.core.payloads import FORMATS


# key -> (type check, parser) for the queue-level settings (also valid under `defaults:`)
def _positive_int(lo: int, hi: int):
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo} and {hi}, got {value}")
        return value

    return check


def _format(value: object) -> str:
    if value not in FORMATS:
        raise ValueError(f"must be one of {', '.join(FORMATS)}, got {value!r}")
    return str(value)


def _handler(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a handler such as package.module:function or exec:/path/cmd")
    return value.strip()


def _bool(value: object) -> bool:
    if not isinstance(value, bool):  # 1 or "false" (quoted) would be truthy surprises
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _optional_int(lo: int, hi: int):
    check = _positive_int(lo, hi)

    def optional(value: object) -> int | None:
        return None if value is None else check(value)

    return optional


#: a rate's unit -> its seconds
RATE_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
              "hour": 3600.0}  # fmt: skip


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")


def parse_rate(value: object) -> float | None:
    """``20/s``, ``600/min``, ``5/h`` -> starts per second; None (YAML ``null``): no limit."""
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if not match or match.group(2) not in RATE_UNITS:
        raise ValueError(f"expected a rate such as 20/s, 600/min or 5/h, got {value!r}")
    per_second = float(match.group(1)) / RATE_UNITS[match.group(2)]
    if not 0 < per_second <= 1_000_000:
        raise ValueError(f"must be more than 0 and at most 1000000/s, got {value!r}")
    return per_second


def format_rate(per_second: float) -> str:
    """A rate as the config would say it: ``20/s``, ``600/min`` -> ``10/s``, ``5/h``."""
    for unit, seconds in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        count = per_second * seconds
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}/{unit}"
    return f"{per_second * 3600:g}/h"


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


QUEUE_KEYS: dict[str, Any] = {
    "handler": _handler,
    "format": _format,
    "max_errors": _positive_int(1, 1_000_000),
    "retry_delay": parse_duration,
    "retry_delay_max": parse_duration,
    "stalled_after": _positive_duration,
    "timeout": parse_duration,
    "batch_size": _positive_int(1, 10_000),
    "concurrency": _positive_int(1, 256),
    "max_drains": _optional_int(1, 1000),
    "rate_limit": parse_rate,
    "unique_retention": parse_duration,
    "requeue_stalled": _bool,
    "group_ack": _bool,
    "ack_delay": parse_duration,
    "quiet_retries": _bool,
    "notify": _bool,
    "on_stalled": _handler,
    "on_failed": _handler,
}
