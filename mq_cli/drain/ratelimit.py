"""rate_limit: across every host, a queue's handlers start no faster than its rate.

A token bucket per queue in ``{table}_rates``, on the database's clock. Each
claim of a rate-limited queue takes its tokens in the claim's own transaction
(one statement, plus a read on MySQL, which has no RETURNING): up to the batch
size, refilled by the time elapsed at the queue's rate, the bucket holding at
most one second's worth (at least one token); the claim takes at most as many
messages as it was granted and gives back what it could not use. A new bucket
starts full. So over any window of T seconds at most rate x T + one second's
worth start, and over a long run exactly the rate.

A drain granted nothing while messages are ready sleeps until the next token
is due (plus a random part of one token's interval, so that the drains waiting
for it do not all wake at once and the same one wins each time), then claims
again. It waits only as long as the run may last: until ``--max-seconds``, or
without it, with ``--wait``, for as long as needed; a cron drain with neither
waits for a token due within :data:`WAIT_MAX` and otherwise stops (exit 0),
leaving the messages to the next run.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mq_cli.core.errors import SchemaMissing

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import QueueConfig
    from mq_cli.core.models import Message

log = logging.getLogger("mq")

#: a cron drain without --max-seconds waits at most this long for its next token
WAIT_MAX = 60.0
#: while it waits, the drain still ticks (run log, fleet slot) this often
TICK_EVERY = 0.5


class Throttle:
    """One drain's side of its queues' buckets."""

    def __init__(self) -> None:
        #: seconds waited for tokens, added to the bucket's total by the next claim
        self.slept = 0.0
        #: after a claim: seconds until the next token when none was granted while
        #: messages are ready; None otherwise
        self.due_in: float | None = None
        self._checked: set[str] = set()

    def claim(self, backend: Backend, queue: QueueConfig, size: int, owner: str) -> list[Message]:
        self.due_in = None
        if queue.rate_limit is None:
            return backend.claim(queue.name, size, owner)
        if queue.name not in self._checked:
            rates = f"{backend.table}_rates"
            if rates in backend.limits_missing():
                raise SchemaMissing(
                    f"table {rates} is missing (queue {queue.name}'s rate_limit keeps its "
                    "tokens there): run `mq init`"
                )
            self._checked.add(queue.name)
        batch, self.due_in = backend.claim_limited(
            queue.name, size, owner, queue.rate_limit, self.slept
        )
        self.slept = 0.0
        return batch

    def wait(
        self,
        queue: QueueConfig,
        deadline: float | None,
        forever: bool,
        stop: Callable[[], bool],
        tick: Callable[[], None],
    ) -> bool:
        """After a claim that found messages but no token: sleep until the next token is
        due. False when it is not worth waiting (the run ends first: see the module)."""
        if self.due_in is None or queue.rate_limit is None:
            return False
        interval = 1.0 / queue.rate_limit
        pause = self.due_in + random.uniform(0.0, min(interval, 1.0)) * 0.5
        now = time.monotonic()
        until = deadline if deadline is not None else (math.inf if forever else now + WAIT_MAX)
        if now + self.due_in > until:
            log.info(
                "queue %s: rate_limit: the next token is due in %.1fs, after this run ends; "
                "leaving the rest to the next run", queue.name, self.due_in,
            )  # fmt: skip
            return False
        end = min(now + pause, until)
        while not stop():
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, TICK_EVERY))
            tick()
        self.slept += time.monotonic() - now
        return True
