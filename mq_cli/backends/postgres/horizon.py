"""What holds PostgreSQL's vacuum horizon, for `mq check`.

VACUUM removes a deleted row only once no transaction can still see it. mq's
table deletes every acknowledged message, so anything that holds the horizon
back lets dead rows pile up and claims slow down hour by hour: a long open
transaction (in any database before PostgreSQL 14, and through a standby's
hot_standby_feedback), a prepared (two-phase) transaction whose coordinator is
gone, a standby's oldest query through hot_standby_feedback (pg_stat_replication's
backend_xmin), a replication slot (its xmin: a standby's oldest query; its
catalog_xmin: a logical slot, which also keeps WAL). Each check names the oldest
holder, its age and what to do; :func:`facts` gives the same for `mq status
--json`; the statements are in postgres/postgres.sql.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mq_cli.backends import bloat, traits

#: an active slot this many transactions behind fails the check
HORIZON_XIDS = 1_000_000

Rows = Callable[[str], list[Any]]
Found = tuple[str, bool, str]
HELD = "VACUUM cannot remove the queue's deleted rows meanwhile"


def horizon(rows: Rows, long_for: float, xids: int | None = None) -> list[Found]:
    """One line each: open transactions, prepared transactions, standbys, replication
    slots; ``rows(name)`` runs a named statement. Fails what is older than ``long_for``
    seconds, an inactive slot, or a standby or active slot more than ``xids`` behind."""
    xids = HORIZON_XIDS if xids is None else xids
    return [
        transactions(rows, long_for), prepared(rows, long_for), standbys(rows, xids),
        slots(rows, xids),
    ]  # fmt: skip


def facts(rows: Rows) -> dict[str, Any]:
    """What holds the horizon, as `mq status --json`'s ``vacuum_horizon``: the oldest
    open transaction (or null), and every standby, slot and prepared transaction that
    holds rows back, ages in seconds and in transactions (``xid_age``)."""
    found = rows("long_transaction")
    oldest = None
    if found and found[0][1] is not None:
        pid, age, state, user, app, database, xids = found[0]
        oldest = {
            "pid": int(pid), "seconds": round(float(age), 3), "state": state, "user": user,
            "application_name": app, "database": database, "xid_age": _int(xids),
        }  # fmt: skip
    return {
        "oldest_transaction": oldest,
        "standbys": [
            {"application_name": app, "client_addr": addr, "xid_age": _int(xids)}
            for app, addr, xids in rows("standby_horizons")
        ],
        "replication_slots": [
            {
                "name": name,
                "type": kind,
                "active": bool(active),
                "database": database,
                "xmin_age": _int(xmin),
                "catalog_xmin_age": _int(catalog),
            }
            for name, kind, active, database, xmin, catalog in rows("slot_horizons")
        ],  # fmt: skip
        "prepared_transactions": [
            {
                "gid": gid,
                "seconds": round(float(age), 3),
                "owner": owner,
                "database": database,
                "xid_age": _int(xids),
            }
            for gid, age, owner, database, xids in rows("prepared_transactions")
        ],  # fmt: skip
    }


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _behind(xids: Any) -> str:
    return f", {int(xids)} transactions behind" if xids is not None else ""


def transactions(rows: Rows, long_for: float) -> Found:
    found = rows("long_transaction")
    if not found or found[0][1] is None or float(found[0][1]) <= long_for:
        return ("transactions", True, "none open for long")
    pid, age, state, user, app, database, xids = found[0]
    return (
        "transactions", False,
        f"a transaction has been open for {duration(float(age))} (pid {pid}, user {user}, "
        f"{app or 'no application_name'}, {state}, database {database}{_behind(xids)}): "
        f"{HELD}; end it (SELECT pg_terminate_backend({pid})) or fix its client",
    )  # fmt: skip


def prepared(rows: Rows, long_for: float) -> Found:
    found = rows("prepared_transactions")
    if not found:
        return ("prepared transactions", True, "none")
    gid, age, owner, database, xids = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    if float(age) <= long_for:
        return ("prepared transactions", True, f"{len(found)}, the oldest {duration(age)} old")
    return (
        "prepared transactions", False,
        f"'{gid}' (database {database}, owner {owner}) has been prepared for "
        f"{duration(float(age))}{_behind(xids)}{more}: {HELD}; if its coordinator is gone, "
        f"run ROLLBACK PREPARED '{gid}' (or COMMIT PREPARED) in database {database}",
    )  # fmt: skip


def standbys(rows: Rows, xids: int) -> Found:
    found = rows("standby_horizons")
    if not found:
        return ("standbys", True, "none holds old rows (no hot_standby_feedback xmin)")
    app, addr, behind = found[0]
    if int(behind or 0) <= xids:
        return ("standbys", True, f"{len(found)} with hot_standby_feedback, none far behind")
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (
        "standbys", False,
        f"standby {app or 'no application_name'} ({addr or 'local socket'}) holds rows "
        f"{int(behind)} transactions back through hot_standby_feedback{more}: {HELD}; "
        "end the long query or transaction on that standby, or turn hot_standby_feedback "
        "off there (its queries may then be cancelled)",
    )  # fmt: skip


def slots(rows: Rows, xids: int) -> Found:
    found = rows("slot_horizons")
    if not found:
        return ("replication slots", True, "none holds old rows")
    for name, kind, active, database, xmin_age, catalog_age in found:
        held = max(int(xmin_age or 0), int(catalog_age or 0))
        if active and int(xmin_age or 0) <= xids:
            continue
        what = "xmin: every table" if xmin_age is not None else "catalog_xmin: the catalogs"
        where = f", database {database}" if database else ""
        todo = (
            "its consumer lags (a long query on a standby with hot_standby_feedback?): "
            "end that query or check the consumer"
            if active
            else f"nothing reads it: if its standby or subscriber is gone, "
            f"SELECT pg_drop_replication_slot('{name}') (it also keeps WAL)"
        )
        state = "active" if active else "inactive"
        effect = HELD if xmin_age is not None else "the system catalogs bloat meanwhile"
        return (
            "replication slots", False,
            f"'{name}' ({kind}, {state}{where}) holds rows {held} transactions back "
            f"({what}): {effect}; {todo}",
        )  # fmt: skip
    return ("replication slots", True, f"{len(found)} active, none far behind")


def dead_rows(table: str, rows: list[Any]) -> list[traits.Found]:
    """What VACUUM and ANALYZE left of the table (its dead_rows statement's row),
    judged as every dialect's table growth is (backends/bloat.py)."""
    if not rows:
        return []
    live, dead, since_vacuum, changes, since_analyze, size, auto = rows[0]
    vacuumed, analyzed = _seconds(since_vacuum), _seconds(since_analyze)
    return [
        bloat.pg_dead_rows(table, live, dead, vacuumed, size, auto),
        bloat.pg_statistics(table, int(live), int(changes), analyzed, auto),
    ]


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)
