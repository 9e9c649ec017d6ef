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
        #: a claim sent ahead and not read yet: (its group's ids, the owner, the size,
        #: whether the connection broke while it was sent: it may have run or not)
        self.ahead: tuple[list[int], str, int, bool] | None = None
        self.sent_at = 0.0  # when it went (time.monotonic())
        self._cannot_ahead = False  # the database said it cannot (SQLite; an old PyMySQL)
        session.on_let_go.append(self._forget_ahead)

    def _forget_ahead(self) -> None:
        self.ahead = None  # what it took, if anything, stays processing for gc

    def claim(self, queue: QueueConfig) -> list[Message]:
        session = self.session
        size = self.options.batch_size or queue.batch_size
        if self.options.max_messages is not None:
            done = self.report.succeeded + self.report.failed
            size = max(1, min(size, self.options.max_messages - done))
        keep: list[int] = []  # between batches the drain holds nothing else on the queue
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
                backend.release_owner(queue.name, session.owner, keep)
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

    def send_ahead(self, queue: QueueConfig) -> bool:
        """group_ack: send the next claim (with the successes so far) while the batch
        runs, to be read by collect_ahead; False where the database cannot."""
        session = self.session
        if self._cannot_ahead:
            return False
        size = self.options.batch_size or queue.batch_size
        grouped, owner = [m.id for m in session.done], session.owner
        tries = 0

        def send(backend: Backend) -> bool:
            nonlocal tries
            tries += 1
            # Sent again after a lost connection, it could run twice: collect_ahead
            # claims anew instead, as after a lost reply.
            return tries > 1 or backend.claim_ahead_send(queue.name, size, owner, grouped)

        if not session.db(send):
            self._cannot_ahead = True  # not asked again at every batch
            return False
        self.ahead = (grouped, owner, size, tries > 1)
        self.sent_at = time.monotonic()
        # Deleted by that claim: neither a tick's DELETE nor the next claim has them.
        session.done = []
        return True

    def settle_ahead(self, older_than: float) -> None:
        """Read the claim sent ahead if it went over ``older_than`` s ago: a handler
        outlasted the estimate that sent it (MariaDB: the claim's transaction is open
        until then)."""
        if self.ahead is not None and time.monotonic() - self.sent_at >= older_than:
            self.session.db(lambda b: b.claim_ahead_settle())

    def collect_ahead(self, queue: QueueConfig) -> list[Message]:
        """The batch the claim sent ahead took, once the batch before it is recorded."""
        assert self.ahead is not None
        session = self.session
        (grouped, owner, size, unknown), self.ahead = self.ahead, None
        # Never given back: what this drain holds (the batch that ran) and its successes
        # since the claim went, whose DELETE waits for the next group.
        keep = sorted(session.held) + [m.id for m in session.done]
        deleted, tries = len(grouped), 1 if unknown else 0

        def claim(backend: Backend) -> list[Message]:
            nonlocal deleted, tries
            tries += 1
            if tries == 1:
                deleted, batch = backend.claim_ahead_collect()
                return batch
            # Lost with its reply, as in claim(): what it may have taken goes back.
            if grouped:
                backend.ack_success_many(grouped, owner)
            backend.release_owner(queue.name, owner, keep)
            return backend.claim(queue.name, size, owner)

        batch = session.db(claim)
        session.claim_unknown = False
        if grouped:
            self.acks.group_acknowledged(queue, grouped, deleted, clear=False)
        session.held |= {m.id for m in batch}
        self.report.claimed += len(batch)
        log.debug("queue %s: claimed %d message(s) ahead", queue.name, len(batch))
        return batch
