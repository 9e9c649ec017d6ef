"""A waiting drain (--wait) between batches: how long it waits (short at first,
growing to a second; a retry it recorded starts when its backoff ends), the FIFO
an enqueue on this host wakes it by (host/wakeup.py), and a requeue_stalled queue's
look for dead drains' messages.

One part of the drain (loop.py composes them).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable

from mq_cli.core.config import Config, QueueConfig
from mq_cli.core.durations import format_duration
from mq_cli.core.errors import MqError
from mq_cli.drain.acks import Acknowledger
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.drain.session import DrainSession
from mq_cli.host import clock, slots, wakeup
from mq_cli.host.recovery import requeue_stalled

log = logging.getLogger("mq")

WAIT_POLL_MIN = 0.05
WAIT_POLL_MAX = 1.0  # the contract: --wait polls at least once a second
REQUEUE_LOOK_EVERY = 0.5  # a waiting requeue_stalled drain looks for dead drains' messages
# A retry becomes ready at the database's `now` + its backoff, stored to the
# millisecond: a waiting drain looks that much after the moment it computed.
RETRY_SLACK = 0.005


class Waiting:
    """The drain's waits. ``ticks``: its upkeep, done before each wait."""

    def __init__(
        self,
        config: Config,
        session: DrainSession,
        acks: Acknowledger,
        options: DrainOptions,
        report: DrainReport,
        ticks: Callable[[], None],
    ) -> None:
        self.config = config
        self.session = session
        self.acks = acks
        self.options = options
        self.report = report
        self._ticks = ticks
        self.suspects: dict[str, float] = {}  # owner -> since when its lock is free
        self._looked = 0.0  # time.monotonic() of requeue_stalled's last look

    def begin(self, queue: QueueConfig) -> None:
        """A queue's drain starts: a requeue_stalled queue's first look (which records
        the clock first), else this host's clock record kept fresh."""
        self._looked = time.monotonic()
        if queue.requeue_stalled:
            self.requeue_stalled(queue)
        else:
            clock.observe_quietly(self.session.backend)

    def look_for_stalled(self, queue: QueueConfig, pause: float) -> float:
        """Found the queue empty: a requeue_stalled queue looks for dead drains'
        messages every REQUEUE_LOOK_EVERY, so they come back within seconds, not at
        this drain's next start; the pause before the next claim, shorter while some
        may come back."""
        if queue.requeue_stalled and time.monotonic() - self._looked >= REQUEUE_LOOK_EVERY:
            self._looked = time.monotonic()
            if self.requeue_stalled(queue) or self.suspects:
                # Ready after liveness.GRACE, or a lock under watch: look often.
                pause = min(pause, REQUEUE_LOOK_EVERY)
        return pause

    def waiter(self, queue: QueueConfig) -> wakeup.Waiter | None:
        try:
            return wakeup.Waiter(slots.database_dir(self.config), queue.name, self.session.backend)
        except (OSError, MqError) as exc:  # then it polls, as without one
            log.info("queue %s: no wake-up on enqueue (%s); polling", queue.name, exc)
            return None

    def requeue_stalled(self, queue: QueueConfig) -> int:
        """`requeue_stalled: true`: what `mq gc --stalled --requeue -q QUEUE` would do."""
        # A waiting drain remembers since when a drain's lock is free, and does
        # not wait for it; a cron drain's one look waits (liveness.SUSPECT).
        suspects = self.suspects if self.options.wait else None
        changed, failed = self.session.db(lambda b: requeue_stalled(b, queue, suspects))
        if changed:
            # Worth a mail from cron: a drain died holding these.
            log.warning(
                "queue %s: requeued %d stalled message(s) (their drain's lock was free, or no "
                "heartbeat for over %s: it died?)%s",
                queue.name, changed, format_duration(queue.stalled_after),
                f"; {failed} reached max_errors and are now failed" if failed else "",
            )  # fmt: skip
        return int(changed)

    def idle(self, pause: float, waiter: wakeup.Waiter | None) -> float:
        """Wait before polling again with --wait: short at first, growing to a second;
        an enqueue on this host ends the wait at once."""
        due_list = self.acks.retries_due
        due, now = (due_list[0] if due_list else math.inf), time.monotonic()
        retry = due - now <= pause
        if retry:
            # A retry this drain recorded starts when its backoff ends, not at a
            # poll up to a second later.
            pause = max(due - now, 0.0) + RETRY_SLACK
        deadline = self.session.deadline
        if deadline is not None:
            pause = min(pause, max(deadline - time.monotonic(), 0.0))
        self.report.activity.wait()
        self._ticks()
        if waiter is None:
            time.sleep(pause)
        elif waiter.wait(pause):
            return WAIT_POLL_MIN  # an enqueue came first: the retry stays due
        if retry:
            now = time.monotonic()
            while due_list and due_list[0] <= now:
                heapq.heappop(due_list)
            return WAIT_POLL_MIN
        return min(pause * 2, WAIT_POLL_MAX)
