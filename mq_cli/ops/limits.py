"""What `mq status` says per queue beyond its counts: its fleet limits (max_drains,
rate_limit) as they stand, and why no drain could start it (startfail.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mq_cli.core.keys import format_rate
from mq_cli.host import fleet

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config


@dataclass
class QueueLimits:
    #: (max_drains, slots held now), or None without max_drains
    drains: tuple[int, int | None] | None = None
    #: (per second, tokens now, seconds drains waited for tokens), or None without rate_limit
    rate: tuple[float, float | None, float] | None = None
    #: (since, error) when the last drain that tried could not start the queue
    cannot_start: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        drains = rate = stuck = None
        if self.drains is not None:
            drains = {"limit": self.drains[0], "in_use": self.drains[1]}
        if self.rate is not None:
            per_second, tokens, throttled = self.rate
            rate = {
                "per_second": per_second,
                "tokens": None if tokens is None else round(tokens, 3),
                "throttled_seconds": round(throttled, 3),
            }
        if self.cannot_start is not None:
            stuck = {"since": self.cannot_start[0], "error": self.cannot_start[1]}
        return {"max_drains": drains, "rate_limit": rate, "cannot_start": stuck}

    def lines(self) -> list[str]:
        """For the text and the HTML views (not escaped)."""
        found = []
        if self.drains is not None:
            held = "?" if self.drains[1] is None else self.drains[1]
            found.append(f"max_drains {self.drains[0]}: {held} in use")
        if self.rate is not None:
            per_second, _, throttled = self.rate
            found.append(f"rate_limit {format_rate(per_second)}: drains waited {throttled:.1f}s")
        if self.cannot_start is not None:
            since, error = self.cannot_start
            since = since.replace("T", " ").replace("Z", " UTC")
            found.append(f"no drain could start since {since}: {error}")
        return found


def read(config: Config, backend: Backend, names: set[str]) -> dict[str, QueueLimits]:
    """Each of ``names``' limits, and the queues no drain could start (also those not
    in ``names``: a queue whose drains never start may have no other trace)."""
    stuck = backend.drain_notes()[1]
    tables = not backend.limits_missing()
    found = {}
    for name in sorted(names | stuck.keys()):
        queue = config.queue(name)
        limits = QueueLimits(cannot_start=stuck.get(name))
        if queue.max_drains is not None:
            limits.drains = (queue.max_drains, fleet.in_use(backend, config, queue))
        if queue.rate_limit is not None:
            state = backend.rate_state(name) if tables else None
            limits.rate = (
                queue.rate_limit,
                state[1] if state else None,
                state[2] if state else 0.0,
            )
        found[name] = limits
    return found
