"""Claiming a batch: its size (batch_size, --max-messages), the queue's rate limit,
group_ack's successes deleted by the claim's own commit, and a retry after a lost
reply that first gives back whatever the unknown first try took.

One part of the drain (loop.py composes them), over the session, the lease it
renews and the acknowledger whose grouped successes it carries.
"""

from __future__ import annotations

import logging
import time

from mq_cli.backends.base import Backend
from mq_cli.core.config import QueueConfig
from mq_cli.core.models import Message
from mq_cli.drain.acks import Acknowledger
from mq_cli.drain.lease import Lease
from mq_cli.drain.ratelimit import Throttle
from mq_cli.drain.report import DrainOptions, DrainReport
from mq_cli.drain.session import DrainSession

log = logging.getLogger("mq")


class Claimer:
    """Takes the next batch of a queue for the drain."""

    def __init__(
        self,
        session: DrainSession,
        lease: Lease,
        acks: Acknowledger,
        options: DrainOptions,
        report: DrainReport,
    ) -> None:
        self.session = session
        self.lease = lease
        self.acks = acks
        self.options = options
        self.report = report
        self.throttle = Throttle()

    def claim(self, queue: QueueConfig) -> list[Message]:
        session = self.session
        size = self.options.batch_size or queue.batch_size
        if self.options.max_messages is not None:
            done = self.report.succeeded + self.report.failed
            size = max(1, min(size, self.options.max_messages - done))
        tries = 0
        asked = 0.0
        if session.done and queue.rate_limit is not None:
            self.acks.acknowledge_group(queue)  # a rate-limited claim takes tokens on its own
        # group_ack: the last batch's successes, deleted by the claim's own commit.
        grouped = [m.id for m in session.done]
        deleted = len(grouped)

        def claim(backend: Backend) -> list[Message]:
            nonlocal tries, asked, deleted
            tries += 1
            if tries > 1:
                # The first try's COMMIT may have happened with its reply lost: those
                # rows are ours but unknown. Between batches this drain holds nothing
                # else on the queue (but for the successes of the last, deleted first:
                # whether the first try did is unknown), so put back all it holds there.
                if grouped:
                    backend.ack_success_many(grouped, session.owner)
                backend.release_owner(queue.name, session.owner)
            asked = time.monotonic()  # heartbeat_at is set later than this
            if grouped and tries == 1:
                self.throttle.due_in = None
                deleted, batch = backend.claim_acking(queue.name, size, session.owner, grouped)
                return batch
            return self.throttle.claim(backend, queue, size, session.owner)

        batch = session.db(claim)
        session.claim_unknown = False  # a retry gave back what a lost try may have taken
        if grouped:
            self.acks.group_acknowledged(queue, grouped, deleted)
        self.lease.claimed(queue, asked)
        session.held = {m.id for m in batch}
        self.report.claimed += len(batch)
        if batch:
            log.debug("queue %s: claimed %d message(s)", queue.name, len(batch))
        return batch
