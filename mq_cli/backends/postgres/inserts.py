"""Inserting messages on PostgreSQL: one multi-row INSERT per chunk, its ids drawn
in VALUES order (or one at a time where a unique key may skip one)."""

from __future__ import annotations

from collections.abc import Sequence

from mq_cli.backends.inserts import insert_each, insert_rows
from mq_cli.backends.plumbing import Tx
from mq_cli.core.states import Stored


def insert_messages(
    tx: Tx,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    when: object,
    priority: int,
    unique_key: str | None,
    status: Stored,
) -> list[int | None]:
    """Insert inside the caller's transaction (ours, or an application's)."""
    if unique_key is not None:
        return insert_each(
            tx, sql, queue, payloads, when, priority, unique_key, lambda e: False, status
        )
    chunking = (1000, 64 << 20, lambda p: len(p) + 64)
    return insert_rows(tx, sql, queue, payloads, when, priority, chunking, _returned, status=status)


def _returned(tx: Tx, statement: str, params: list[object], count: int) -> list[int]:
    # One statement draws its ids from the sequence row by row, in VALUES
    # order: sorted, they are the rows' ids in order.
    return sorted(int(row[0]) for row in tx.rows(statement, params))
