"""An operator's request to a running drain (`mq stop DRAIN [--quiet]`): read from
the drain's own row of the run log, which any host can write to.

One part of the drain (loop.py composes it and acts on what it finds). The look
is one read of one row by its key, made from the drain's upkeep (its ticks:
while a handler runs, after results, before each wait of a --wait drain) at
most every :data:`LOOK_EVERY` seconds, and never more often than its queue's
heartbeat (stalled_after / 3) would ask: a request reaches the drain within
that, and costs no round trip per message. A drain with no row (the run log
off, or a cron drain that has claimed nothing yet) cannot be named by `mq
status`, and so is never asked.

- ``stop``: what SIGTERM does (the running handler finishes or hits its
  timeout, the claimed messages that did not start go back to ready, exit 0).
- ``quiet``: the drain claims nothing more and ends once the messages it has
  claimed have run (with the default batch size of 1, its current message):
  unlike ``stop``, nothing it claimed goes back to ready. A claim it sent ahead
  (group_ack) goes back to ready unread. A later ``stop`` still stops it.

A look that fails is logged at debug level and tried again later: the request
is an observer's, like the run log, and must never fail a drain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mq_cli.core.errors import MqError

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend

log = logging.getLogger("mq")

#: a running drain looks for a request at most this often (and at most every
#: stalled_after / 3, its heartbeat interval, when that is shorter)
LOOK_EVERY = 2.0
#: what `mq stop` may ask
KINDS = ("stop", "quiet")


class Requests:
    """A drain's look at its run log row. ``run_id``: the row, once written;
    ``stalled_after``: the drained queue's (0 before its first claim)."""

    def __init__(
        self,
        backend: Callable[[], Backend],
        run_id: Callable[[], int | None],
        stalled_after: Callable[[], float],
    ) -> None:
        self._backend = backend
        self._run_id = run_id
        self._stalled_after = stalled_after
        self._looked = time.monotonic()
        #: what was asked and by whom, once found ("stop" outranks "quiet")
        self.kind: str | None = None
        self.by = ""

    def look(self) -> str | None:
        """A request found by this look (its kind), when one is due and new."""
        run_id = self._run_id()
        if self.kind == "stop" or run_id is None:
            return None
        every = LOOK_EVERY
        if self._stalled_after() > 0:
            every = min(every, self._stalled_after() / 3)
        now = time.monotonic()
        if now - self._looked < every:
            return None
        self._looked = now
        try:
            found = self._backend().run_request(run_id)
        except MqError as exc:
            log.debug("could not look for a stop request: %s", exc)
            return None
        if found is None or found[0] not in KINDS or found[0] == self.kind:
            return None
        self.kind, self.by = found
        return self.kind
