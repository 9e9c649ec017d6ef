"""An operator's request to a running drain (`mq stop DRAIN [--quiet]`): read from
the drain's own row of the run log, which any host can write to.

One part of the drain (loop.py composes it; its should_stop reads ``kind``). The look
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
from mq_cli.drain import signals

if TYPE_CHECKING:
    from mq_cli.drain.lease import Lease
    from mq_cli.drain.report import DrainReport
    from mq_cli.drain.runlog import RunLog
    from mq_cli.drain.session import DrainSession
    from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")

#: a running drain looks for a request at most this often (and at most every
#: stalled_after / 3, its heartbeat interval, when that is shorter)
LOOK_EVERY = 2.0
#: what `mq stop` may ask
KINDS = ("stop", "quiet")


class Requests:
    """A drain's look at its run log row, and what it does about a request.
    ``runner``: the handler runner working now, if any; ``lease``: its stalled_after is
    the drained queue's (0 before its first claim)."""

    def __init__(
        self,
        session: DrainSession,
        runlog: RunLog,
        runner: Callable[[], Runner | None],
        report: DrainReport,
        lease: Lease,
    ) -> None:
        self.session = session
        self.runlog = runlog
        self._runner = runner
        self.report = report
        self.lease = lease
        self._looked = time.monotonic()
        #: what was asked and by whom, once found ("stop" outranks "quiet")
        self.kind: str | None = None
        self.by = ""

    def tick(self) -> None:
        """Look when due; a new request found is acted on: a stop is a SIGTERM's (unless
        a signal came first), a quiet one only makes the drain's should_stop say yes."""
        kind = self.look()
        by = self.by or "someone"
        if kind == "quiet":
            log.info("asked by %s to end quietly (mq stop --quiet): claiming no more", by)
        elif kind == "stop" and not self.session.signals:
            self.session.signals += 1
            name = f"a stop request from {by} (mq stop)"
            signals.say_stopping(name, self.session.in_hand, self.report.activity.running)
            runner = self._runner()
            if runner is not None:
                runner.stop()

    def look(self) -> str | None:
        """A request found by this look (its kind), when one is due and new."""
        run_id = self.runlog.run_id
        if self.kind == "stop" or run_id is None:
            return None
        every = LOOK_EVERY
        if self.lease.stalled_after > 0:
            every = min(every, self.lease.stalled_after / 3)
        now = time.monotonic()
        if now - self._looked < every:
            return None
        self._looked = now
        try:
            found = self.session.backend.run_request(run_id)
        except MqError as exc:
            log.debug("could not look for a stop request: %s", exc)
            return None
        if found is None or found[0] not in KINDS or found[0] == self.kind:
            return None
        self.kind, self.by = found
        return self.kind
