"""PostgreSQL's claims: one statement each, and group_ack's batch end, where the
last group's DELETE and the next claim commit together."""

from __future__ import annotations

import select
from collections.abc import Callable, Sequence
from typing import Any

from mq_cli.backends.claims import RACE_TRIES, lost_race, topped_up, unknown_if_lost
from mq_cli.backends.sqlcore import SqlBackend
from mq_cli.core.models import Message


def claim_with(
    run: Callable[[str, Sequence[object]], list[Any]],
    statement: str,
    queue: str,
    limit: int,
    owner: str,
) -> list[Any]:
    """The rows one claim statement took (``run``: autocommitted, no BEGIN, or in the
    caller's transaction), looking again after a race lost on every row."""
    for _ in range(RACE_TRIES):
        taken, selected = _taken(run(statement, (queue, limit, owner)), queue)
        if taken or not selected:
            break
    taken.sort(key=_claim_order)
    return taken


def claim_alone(db: SqlBackend, conn: Any, queue: str, limit: int, owner: str) -> list[Any]:
    """The claim as one autocommitted statement. Its reply lost, what it took is
    unknown (ClaimUnknown). So a connection the server has already closed (a
    restart, a proxy or pooler gone: its EOF waits on the socket) is found before
    the statement goes, and that loss is a plain one: nothing was sent."""
    with db._errors():
        if select.select([conn.fileno()], [], [], 0)[0]:
            conn.pgconn.consume_input()  # raises at EOF; else keeps what came for later
    with unknown_if_lost(None):
        return claim_with(db._write_rows, db._sql["claim"], queue, limit, owner)


def claim_acking(
    db: SqlBackend, queue: str, limit: int, owner: str, done: Sequence[int]
) -> tuple[int, list[Message]]:
    """group_ack's batch end: the DELETE of ``done`` and the next claim in one statement,
    one commit (postgres/postgres.sql, claim_acking); past its first try, what
    claim() does (race retries, promotion) as claim() does it."""
    if not done:
        return 0, db.claim(queue, limit, owner)
    promoted_now = db._promote_due(queue)
    rows = db._write_rows(db._sql["claim_acking"], (list(done), owner, queue, limit, owner))
    return acked(db, rows, queue, limit, owner, promoted_now)


def acked(
    db: SqlBackend, rows: list[Any], queue: str, limit: int, owner: str, promoted_now: bool
) -> tuple[int, list[Message]]:
    """What a claim_acking statement deleted and took, from its rows (sent now or ahead)."""
    deleted = int(rows[0][9]) if rows else 0
    taken, selected = _taken(rows, queue)
    if not taken and selected:  # every row it selected went to others: look again
        taken = db._claim(queue, limit, owner)
    taken = topped_up(db, taken, queue, limit, owner, promoted_now)
    taken.sort(key=_claim_order)
    return deleted, db._messages_of(taken, owner)


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
