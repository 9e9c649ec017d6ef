"""Claims that verify what they took: the two-statement claim (select, then a
guarded mark), what a claim does when its mark changed fewer rows than it
selected, the claimed rows as Messages, and the test-only switch that makes
claims race for the same rows (an engine whose SKIP LOCKED does not lock).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from mq_cli.backends.plumbing import Tx
from mq_cli.backends.sqlops import as_text
from mq_cli.core.errors import ClaimUnknown, ConnectionLost, ReadOnly
from mq_cli.core.models import Message, claimed_message

log = logging.getLogger("mq")
T = TypeVar("T")

#: claims in a row that lost every row they selected to other drains before one
#: reports the queue empty (only where the SELECT did not lock: see claim_mark)
RACE_TRIES = 50


#: TEST ONLY (tests/faults/test_racing_claims.py): set to 1, it drops the row locks
#: (FOR UPDATE [SKIP LOCKED]) from the claim's SELECT, so that concurrent claims
#: race for the same rows as on an engine whose SKIP LOCKED does not lock; the
#: guarded mark must still give each row to one drain. Never set it in production:
#: every drain would then contend for the same rows.
UNLOCKED_CLAIM_ENV = "MQ_TEST_UNLOCKED_CLAIM"


def unlock_claims_for_tests(sql: dict[str, str], *names: str) -> None:
    """With $MQ_TEST_UNLOCKED_CLAIM=1 (tests only), the claim statements ``names``
    of ``sql`` lose their FOR UPDATE [SKIP LOCKED]; read once, where a dialect
    builds its statements."""
    if os.environ.get(UNLOCKED_CLAIM_ENV) != "1":
        return
    for name in names:
        sql[name], found = re.subn(r"\s+FOR UPDATE(\s+SKIP LOCKED)?\b", "", sql[name])
        if not found:
            raise AssertionError(f"{UNLOCKED_CLAIM_ENV}: no FOR UPDATE in {name}")


def lost_race(queue: str, taken: int, selected: int) -> None:
    """Said with -v: a claim found rows it selected marked by another drain first,
    which row locks prevent (an engine that ignores them, or the test switch)."""
    log.info(
        "queue %s: another drain marked %d of the %d message(s) this claim selected first; "
        "this claim runs only the %d it marked", queue, selected - taken, selected, taken,
    )  # fmt: skip


@contextmanager
def unknown_if_lost(took: Sequence[object] | None) -> Iterator[None]:
    """A connection lost once the claim had taken rows (``took``, filled by its body:
    the COMMIT went, its reply did not come; None: cannot tell, as in an autocommitted
    claim statement) raises ClaimUnknown: the drain must not say it holds nothing.
    Lost before its transaction took rows, the claim took nothing."""
    try:
        yield
    except ReadOnly:
        raise  # refused, not lost: nothing was taken
    except ConnectionLost as exc:
        if took is None or took:
            raise ClaimUnknown(str(exc)) from exc
        raise


def topped_up(
    db: Any, rows: list[Any], queue: str, limit: int, owner: str, promoted_now: bool
) -> list[Any]:
    """A claim's ``rows``, with more claimed once delayed messages that are due were
    promoted, when it came back short and no promotion ran just before it."""
    with unknown_if_lost(rows):  # those rows are held, unseen, if what follows is lost
        if len(rows) < limit and not promoted_now and db.promote(queue):
            rows += db._claim(queue, limit - len(rows), owner)
    return rows


def claim_in(
    transaction: Callable[[Callable[[Tx], T]], T],
    claim: Callable[[Tx], T],
    rows: Callable[[T], Sequence[object]] = lambda result: result,  # type: ignore[assignment,return-value]
) -> T:
    """``claim(tx)`` in ``transaction``, under unknown_if_lost: ``rows(result)`` are the
    rows it took (the result itself, or a part of it)."""
    took: list[object] = []

    def body(tx: Tx) -> T:
        result = claim(tx)
        took[:] = rows(result)
        return result

    with unknown_if_lost(took):
        return transaction(body)


def select_and_mark(
    tx: Tx,
    select: str,
    with_ids: Callable[[str, Sequence[int]], str],
    queue: str,
    limit: int,
    owner: str,
    selected: list[Any] | None = None,
) -> list[Any]:
    """Select and mark, two statements in one transaction (``selected``: the rows
    its first select gave, read already: a claim sent ahead, mysql/ahead.py).

    The mark is guarded (only rows still ready and free), and only the rows
    it changed are returned: its row count says how many, and only when that
    falls short of the rows selected does a third statement say which. A
    claim that lost every row it selected looks again (each statement sees
    what other claims committed meanwhile: READ COMMITTED, or SQLite's lock).
    """
    for _ in range(RACE_TRIES):
        rows = tx.rows(select, (queue, limit)) if selected is None else selected
        selected = None
        if not rows:
            return rows
        ids = [row[0] for row in rows]
        taken = tx.change(with_ids("claim_mark", ids), (owner, *ids))
        if taken == len(rows):
            return rows
        lost_race(queue, taken, len(rows))
        if taken:
            mine = {row[0] for row in tx.rows(with_ids("owned", ids), (*ids, owner))}
            return [row for row in rows if row[0] in mine]
    return []


def claim_acking(
    db: Any, queue: str, limit: int, owner: str, done: Sequence[int]
) -> tuple[int, list[Message]]:
    """``Backend.claim_acking`` for a SqlBackend whose claim is a transaction (MariaDB,
    SQLite): the DELETE of ``done`` runs in the claim's own, so group_ack's batch end
    takes one commit, not two (PostgreSQL: one statement, postgres/claims.py)."""
    if not done:
        return 0, db.claim(queue, limit, owner)
    deleted = 0

    def body(tx: Tx) -> list[Any]:
        nonlocal deleted  # run again after a deadlock: its first try rolled back
        deleted = tx.change(db._with_ids("ack_delete_many", done), (*done, owner))
        return db._claim_rows(tx, queue, limit, owner)

    rows = db._claim_promoting(queue, limit, owner, lambda: claim_in(db._transaction, body))
    return deleted, db._messages_of(rows, owner)


def claimed(
    rows: list[Any], owner: str, time_of: Callable[[Any], datetime | None]
) -> list[Message]:
    """A claim's rows (the claim columns of <dialect>/<dialect>.sql) as Messages."""
    return [
        claimed_message(
            int(row[0]),
            row[1],
            row[2],
            row[3],
            time_of(row[4]),  # type: ignore[arg-type]
            time_of(row[5]),  # type: ignore[arg-type]
            as_text(row[6]),
            bytes(row[7]),
            owner,
        )  # fmt: skip
        for row in rows
    ]
