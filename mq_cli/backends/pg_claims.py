"""PostgreSQL's claims: one statement each, and group_ack's batch end, where the
last group's DELETE and the next claim commit together."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mq_cli.backends.claims import RACE_TRIES, lost_race
from mq_cli.backends.sqlcore import SqlBackend
from mq_cli.core.models import Message


class PgClaims(SqlBackend):
    """The claims of :class:`mq_cli.backends.postgres.PostgresBackend`."""

    def _claim(self, queue: str, limit: int, owner: str) -> list[Any]:
        # Only the rows the guarded UPDATE changed come back (see the claim's SQL);
        # its last column counts the rows selected, on a row of NULLs if none was taken.
        for _ in range(RACE_TRIES):
            rows = self._write_rows(self._sql["claim"], (queue, limit, owner))
            selected = int(rows[0][8]) if rows else 0
            taken = [row for row in rows if row[0] is not None]
            if len(taken) < selected:
                lost_race(queue, len(taken), selected)
            if taken or not selected:
                break
        taken.sort(key=lambda row: (-row[2], row[5], row[0]))  # the claim index's order
        return taken

    def claim_acking(
        self, queue: str, limit: int, owner: str, done: Sequence[int]
    ) -> tuple[int, list[Message]]:
        # One statement, one commit (sql/postgres.sql, claim_acking); past its first
        # try, what claim() does (race retries, promotion) as claim() does it.
        if not done:
            return 0, self.claim(queue, limit, owner)
        promoted_now = self._promote_due(queue)
        params = (*done, owner, queue, limit, owner)
        rows = self._write_rows(self._with_ids("claim_acking", done), params)
        deleted, selected = (int(rows[0][9]), int(rows[0][8])) if rows else (0, 0)
        taken = [row for row in rows if row[0] is not None]
        if len(taken) < selected:
            lost_race(queue, len(taken), selected)
        if not taken and selected:  # every row it selected went to others: look again
            taken = self._claim(queue, limit, owner)
        if len(taken) < limit and not promoted_now and self.promote(queue):
            taken += self._claim(queue, limit - len(taken), owner)
        taken.sort(key=lambda row: (-row[2], row[5], row[0]))  # the claim index's order
        return deleted, self._messages_of(taken, owner)
