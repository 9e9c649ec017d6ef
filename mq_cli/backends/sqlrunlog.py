"""The run log's statements for every SQL backend (mq_cli/drain/runlog.py decides what they mean).

A part of every SQL backend (parts.RunLogPart), like sqlops.py. The
tables are ``{table}_runs`` (one row per drain run) and ``{table}_rollup``
(per run, queue and time slice: counts and histograms); their statements are
in <dialect>/<dialect>.sql with the rest. Times are Unix seconds (floats) of the
database's clock, as the drain measured them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from mq_cli.backends.plumbing import Executor, Tx
from mq_cli.core.errors import PermissionDenied, SchemaMissing
from mq_cli.core.models import Run, Slice
from mq_cli.core.states import Action

T = TypeVar("T")

#: the run log's DDL (named blocks), for `mq init` and the migration to version 3
DDL = ("create_runs", "create_runs_index", "create_rollup", "create_rollup_index")
#: the runs' columns schema version 5 added (the migration to it: runs_add_<column>)
ADDED_IN_5 = ("stop_request", "stop_by", "stop_at", "end_reason")


class SqlRunLog:
    """The run log's reads and writes (parts.RunLogPart) over a dialect's executor."""

    def __init__(self, db: Executor) -> None:
        self.db = db

    def runlog_access(self) -> dict[str, str]:
        # Read, not looked up: a catalog hides a table from a user without privileges
        # on it, so a table the user may not read looked missing. MySQL answers "denied"
        # for a missing table too when the user has no privilege on the database.
        found = {}
        for name, probe in (("runs", "runs_probe"), ("rollup", "rollup_probe")):
            try:
                self.db._rows(self.db._sql[probe])
            except SchemaMissing:
                found[f"{self.db.table}_{name}"] = "missing"
            except PermissionDenied:
                found[f"{self.db.table}_{name}"] = "denied"
        return found

    def run_start(
        self, owner: str, host: str, pid: int, queues: Sequence[str], queue: str, at: float
    ) -> int:
        params = (owner, host[:255], pid, ",".join(queues), queue, at, at)
        ident = self.db._retried(
            lambda: Tx(self.db._cursor()).insert(self.db._sql["runs_insert"], params)
        )
        assert ident is not None
        return ident

    def run_update(
        self,
        run_id: int,
        seen_at: float,
        queue: str | None,
        counts: tuple[int, int, int, int],
        running: tuple[int | None, float | None] = (None, None),
        ended: tuple[float, int, str | None] | None = None,
    ) -> None:
        ended_at, exit_code, reason = ended if ended else (None, None, None)
        params = (seen_at, ended_at, exit_code, queue, *counts, *running, reason, run_id)
        self.db._change(self.db._sql["runs_update"], params)

    def run_request(self, run_id: int) -> tuple[str, str] | None:
        rows = self.db._rows(self.db._sql["runs_request"], (run_id,))
        if not rows or rows[0][0] is None:
            return None
        return str(rows[0][0]), str(rows[0][1] or "")

    def run_ask_stop(self, run_id: int, kind: str, by: str, at: float) -> bool:
        return (
            self.db._change(self.db._sql["runs_ask_stop"], (kind, by[:300], at, run_id, kind)) > 0
        )

    def runs_add_columns(self) -> list[str]:
        table = f"{self.db.table}_runs"
        have = {str(row[0]) for row in self.db._rows(self.db._sql["table_columns"], (table,))}
        if not have:
            return []  # no runs table: `mq init` makes it whole
        added = [column for column in ADDED_IN_5 if column not in have]
        for column in added:
            self.db._change(self.db._sql[f"runs_add_{column}"], ())
        return added

    def rollup_add(self, rows: Sequence[tuple[object, ...]]) -> None:
        def body(tx: Tx) -> None:
            for row in rows:
                tx.change(self.db._sql["rollup_insert"], row)

        if rows:
            self.db._transaction(body)

    def runlog_purge(self, before: float) -> int:
        deleted = self.db._change(self.db._sql["rollup_purge"], (before,))
        return deleted + self.db._change(self.db._sql["runs_purge"], (before,))

    def runs_live(self, seen_after: float) -> list[Run]:
        return [_run(row) for row in self.db._rows(self.db._sql["runs_live"], (seen_after,))]

    def runs_recent(self, limit: int) -> list[Run]:
        return [_run(row) for row in self.db._rows(self.db._sql["runs_recent"], (limit,))]

    def rollup_since(self, since: float) -> list[Slice]:
        return [
            Slice(str(r[0]), float(r[1]), float(r[2]), int(r[3]), int(r[4]), float(r[5]),
                  float(r[6]), str(r[7] or ""), str(r[8] or ""))
            for r in self.db._rows(self.db._sql["rollup_since"], (since,))
        ]  # fmt: skip

    def rollup_totals(self) -> dict[str, tuple[int, int]]:
        rows = self.db._rows(self.db._sql["rollup_totals"])
        return {str(q): (int(done or 0), int(failed or 0)) for q, done, failed in rows}

    def rollup_series(
        self, step: float, since: float
    ) -> dict[str, list[tuple[float, int, int, int | None]]]:
        found: dict[str, list[tuple[float, int, int, int | None]]] = {}
        for queue, index, done, failed, backlog in self.db._rows(
            self.db._sql["rollup_series"], (step, since)
        ):
            point = (int(index) * step, int(done or 0), int(failed or 0),
                     None if backlog is None else int(backlog))  # fmt: skip
            found.setdefault(str(queue), []).append(point)
        return found

    def held_by_owner(self, queues: Iterable[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for queue in sorted(set(queues)):  # by queue: the claim index, not a table scan
            for owner, count in self.db._rows(self.db._sql["held_by_owner"], (queue,)):
                if owner:
                    found[str(owner)] = found.get(str(owner), 0) + int(count)
        return found


def _run(row: Sequence[Any]) -> Run:
    def number(value: Any) -> float | None:
        return None if value is None else float(value)

    return Run(
        id=int(row[0]), owner=str(row[1]), host=str(row[2]), pid=int(row[3]),
        queues=tuple(q for q in str(row[4]).split(",") if q), queue=row[5],
        started_at=float(row[6]), seen_at=float(row[7]), ended_at=number(row[8]),
        claimed=int(row[9]), succeeded=int(row[10]), failed=int(row[11]), returned=int(row[12]),
        exit_code=None if row[13] is None else int(row[13]),
        running_id=None if row[14] is None else int(row[14]), running_since=number(row[15]),
        stop_request=None if row[16] is None else Action(row[16]),
        stop_by=None if row[17] is None else str(row[17]), stop_at=number(row[18]),
        end_reason=None if row[19] is None else str(row[19]),
    )  # fmt: skip
