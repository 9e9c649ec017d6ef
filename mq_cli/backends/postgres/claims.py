"""PostgreSQL's claims: one statement each, and group_ack's batch end, where the
last group's DELETE and the next claim commit together."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mq_cli.backends.claims import RACE_TRIES, lost_race
from mq_cli.backends.plumbing import Tx
from mq_cli.backends.sqlcore import SqlBackend
from mq_cli.core.models import Message


class PgClaims(SqlBackend):
    """The claims of :class:`mq_cli.backends.postgres.PostgresBackend`."""

    def _claim(self, queue: str, limit: int, owner: str) -> list[Any]:
        return self._claim_with(self._write_rows, queue, limit, owner)  # no BEGIN

    def _claim_rows(self, tx: Tx, queue: str, limit: int, owner: str) -> list[Any]:
        # Inside a transaction of the caller's (rate_limit: the tokens and the claim).
        return self._claim_with(tx.rows, queue, limit, owner)

    def _claim_with(
        self, run: Callable[[str, Sequence[object]], list[Any]], queue: str, limit: int, owner: str
    ) -> list[Any]:
        for _ in range(RACE_TRIES):
            taken, selected = _taken(run(self._sql["claim"], (queue, limit, owner)), queue)
            if taken or not selected:
                break
        taken.sort(key=_claim_order)
        return taken

    def claim_acking(
        self, queue: str, limit: int, owner: str, done: Sequence[int]
    ) -> tuple[int, list[Message]]:
        # One statement, one commit (postgres/postgres.sql, claim_acking); past its first
        # try, what claim() does (race retries, promotion) as claim() does it.
        if not done:
            return 0, self.claim(queue, limit, owner)
        promoted_now = self._promote_due(queue)
        params = (*done, owner, queue, limit, owner)
        rows = self._write_rows(self._with_ids("claim_acking", done), params)
        deleted = int(rows[0][9]) if rows else 0
        taken, selected = _taken(rows, queue)
        if not taken and selected:  # every row it selected went to others: look again
            taken = self._claim(queue, limit, owner)
        if len(taken) < limit and not promoted_now and self.promote(queue):
            taken += self._claim(queue, limit - len(taken), owner)
        taken.sort(key=_claim_order)
        return deleted, self._messages_of(taken, owner)


def _taken(rows: list[Any], queue: str) -> tuple[list[Any], int]:
    """The rows a claim statement took, and how many it selected. Only the rows the
    guarded UPDATE changed come back (see the claim's SQL); the last column counts
    the rows selected, on a row of NULLs when none was taken."""
    selected = int(rows[0][8]) if rows else 0
    taken = [row for row in rows if row[0] is not None]
    if len(taken) < selected:
        lost_race(queue, len(taken), selected)
    return taken, selected


def _claim_order(row: Sequence[Any]) -> tuple[Any, ...]:
    return (-row[2], row[5], row[0])  # the claim index's: priority DESC, available_at, id
