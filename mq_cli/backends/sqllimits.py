"""The fleet limits' statements for every SQL backend: max_drains' slot rows and
rate_limit's token buckets (mq_cli/host/fleet.py and mq_cli/drain/ratelimit.py decide what
they mean).

A part of every SQL backend (parts.LimitsPart), like sqlrunlog.py. The
tables are ``{table}_slots`` (a row per slot, for a fleet without shared session
locks) and ``{table}_rates`` (a bucket per queue); `mq init` makes them. Their
times are Unix seconds of the database's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mq_cli.backends.plumbing import Executor, Tx

T = TypeVar("T")

#: the tables' DDL (named blocks), for `mq init`
DDL = ("create_slots", "create_rates")


class SqlLimits:
    """Slot rows and token buckets (parts.LimitsPart) over a dialect's executor."""

    def __init__(self, db: Executor) -> None:
        self.db = db

    def limits_missing(self) -> list[str]:
        tables = (f"{self.db.table}_slots", f"{self.db.table}_rates")
        return [
            name for name in tables if not self.db._rows(self.db._sql["table_columns"], (name,))
        ]

    # -- max_drains without session locks: a row per slot, with a heartbeat ----------

    def slot_row_take(self, queue: str, slot: int, owner: str, stale_after: float) -> bool:
        self.db._change(self.db._sql["slot_seed"], (queue, slot))
        return self.db._change(self.db._sql["slot_take"], (owner, queue, slot, stale_after)) == 1

    def slot_row_keep(self, queue: str, slot: int, owner: str) -> bool:
        return self.db._change(self.db._sql["slot_keep"], (queue, slot, owner)) == 1

    def slot_row_release(self, queue: str, slot: int, owner: str) -> None:
        self.db._change(self.db._sql["slot_release"], (queue, slot, owner))

    def slot_rows_in_use(self, queue: str, slots: int, stale_after: float) -> int:
        return int(self.db._rows(self.db._sql["slots_in_use"], (queue, slots, stale_after))[0][0])

    # -- rate_limit: a token bucket per queue -------------------------------------------

    def take_tokens(
        self, tx: Tx, queue: str, want: int, per_second: float, slept: float
    ) -> tuple[int, float]:
        """Inside the claim's transaction: up to ``want`` tokens; (granted, tokens left).
        The bucket holds one second's worth, at least one token; a new one starts full."""
        cap = max(per_second, 1.0)
        first = min(want, int(cap))
        params = {
            "queue": queue, "rate": per_second, "tokens0": cap - first, "grant0": first,
            "slept": slept, "want": want, "cap": cap,
        }  # fmt: skip
        rows = tx.rows(self.db._sql["rate_take"], params)  # type: ignore[arg-type]
        if not rows:  # MySQL: no RETURNING; this transaction holds the row's lock
            rows = tx.rows(self.db._sql["rate_read"], (queue,))
        return int(rows[0][0]), float(rows[0][1])

    def refund_tokens(self, tx: Tx, queue: str, tokens: int) -> None:
        tx.change(self.db._sql["rate_refund"], (tokens, queue))

    def ready_exists(self, tx: Tx, queue: str) -> bool:
        return bool(tx.rows(self.db._sql["ready_exists"], (queue, queue)))

    def claim_with_tokens(
        self,
        tx: Tx,
        claim: Callable[[Tx, int], list[Any]],
        queue: str,
        want: int,
        rate: tuple[float, float],
    ) -> tuple[list[Any], float | None]:
        """A rate-limited claim's transaction: take up to ``want`` tokens, ``claim`` as
        many rows, give back the tokens not used. ``rate``: (per_second, seconds slept
        for tokens). With none granted while messages are ready: the seconds until the
        next token, else None."""
        per_second, slept = rate
        granted, left = self.take_tokens(tx, queue, want, per_second, slept)
        rows = claim(tx, granted) if granted else []
        if len(rows) < granted:
            self.refund_tokens(tx, queue, granted - len(rows))
        if granted or not self.ready_exists(tx, queue):
            return rows, None
        return rows, max(1.0 - left, 0.0) / per_second

    def rate_state(self, queue: str) -> tuple[float, float, float] | None:
        """(per second, tokens now, seconds drains waited for tokens) or None."""
        rows = self.db._rows(self.db._sql["rate_state"], (queue,))
        if not rows:
            return None
        return float(rows[0][0]), float(rows[0][1]), float(rows[0][2])
