"""A drain whose database went away while it held nothing waits for it, up to the
end of its own run, instead of exiting 3 at once: a server restart then costs
the restart, not the rest of the minute until cron's next start.

How long it waits: until ``--max-seconds`` ends; with ``--wait`` and no
``--max-seconds``, until the database answers; a plain cron drain (neither)
waits :data:`PATIENCE` seconds from the moment the database went away. A drain
that holds messages when the database goes keeps the shorter window of
session.py (``RECONNECT_FOR``): its running handler fenced, what it held left
to gc; then, holding nothing, it waits the same way. At start-up, a database
that cannot be reached (refused, timed out, starting up) is waited for alike.

It says so on stderr once when the wait begins and once when the database is
back; each try in between only with ``-v``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger("mq")

#: how long a plain cron drain (no --max-seconds, no --wait) waits for its database
PATIENCE = 30.0
#: between two tries to reconnect: doubling from the first to the last, which is the
#: poll interval of --wait, so the first message after the server's return starts
#: within a second of it
PAUSE_FIRST = 0.25
PAUSE_MAX = 1.0


class Outage:
    """One drain's wait for its database: since when, until when, and what it said."""

    def __init__(self, deadline: Callable[[], float | None], waits: bool, patience: float):
        """``deadline``: the drain's end (time.monotonic(), --max-seconds) or None;
        ``waits``: --wait; ``patience``: how long a drain with neither waits."""
        self._deadline = deadline
        self._waits = waits
        self._patience = patience
        self.since: float | None = None  # time.monotonic() when the database went away
        self.announced = False
        self._pause = PAUSE_FIRST

    def begin(self) -> None:
        """A statement failed for want of the database (called at each failure)."""
        if self.since is None:
            self.since = time.monotonic()
            self._pause = PAUSE_FIRST

    def until(self) -> float:
        """time.monotonic() until which a drain that holds nothing waits (inf: for ever)."""
        deadline = self._deadline()
        if deadline is not None:
            return deadline
        if self._waits:
            return math.inf
        return (self.since or time.monotonic()) + self._patience

    def announce(self, where: str, error: object) -> None:
        """Once per outage: the database is away, and how long this drain waits."""
        if self.announced:
            log.info("%s%s; reconnecting", where, error)
            return
        self.announced = True
        log.warning("%slost the database (%s); reconnecting %s", where, error, self._horizon())

    def pause(self) -> float:
        """Seconds to sleep before the next try: growing, never past the end of the wait."""
        pause = min(self._pause, max(self.until() - time.monotonic(), 0.0))
        self._pause = min(self._pause * 2, PAUSE_MAX)
        return pause

    def over(self, where: str) -> None:
        """A statement went through again."""
        if self.since is not None and self.announced:
            log.warning("%sthe database is back after %.1f s", where, time.monotonic() - self.since)
        self.since = None
        self.announced = False

    def ended_text(self, where: str, claim_unknown: bool) -> str:
        """Why a drain that holds nothing stops waiting with exit 3; ``claim_unknown``: it
        went at a claim's COMMIT, which may have taken messages unseen (ClaimUnknown)."""
        text = f"{where}the database stayed away until {self._why()}; "
        if claim_unknown:
            return text + (
                "it went at a claim's commit: what that claim took, if it went through, "
                "stays processing and shows as stalled after stalled_after; "
                "`mq gc --stalled --requeue` recovers it"
            )
        return text + "this drain holds no message"

    def _horizon(self) -> str:
        until = self.until()
        if until == math.inf:
            return "until it answers (--wait without --max-seconds)"
        at = time.localtime(time.time() + until - time.monotonic())
        return f"until {time.strftime('%H:%M:%S', at)} ({self._why()})"

    def _why(self) -> str:
        if self._deadline() is not None:
            return "the end of --max-seconds"
        return f"the end of a cron drain's patience, {self._patience:g} s"
