"""PostgreSQL's part of `mq init` (backends/sqlschema.py has the rest): the storage
parameters of a delete-heavy table, and what a race with another init looks like."""

from __future__ import annotations

from typing import Any

from mq_cli.backends.plumbing import Executor

#: a queue table that empties and fills all day: vacuum it early and unthrottled, and
#: leave room on each page for the claim's and the ack's new row versions
STORAGE = {
    "fillfactor": "70",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_cost_delay": "0",
}
#: duplicate_table, duplicate_object (an index), duplicate_column
DUPLICATES = ("42P07", "42710", "42701")
#: the catalog's unique indexes a concurrent CREATE of the same name violates
CATALOG_NAMES = ("pg_type_typname_nsp_index", "pg_class_relname_nsp_index")


def storage() -> str:
    """The table's storage parameters, as WITH (...) and ALTER TABLE ... SET (...) take them."""
    return ", ".join(f"{name} = {value}" for name, value in STORAGE.items())


def storage_differs(reloptions: list[str] | None) -> bool:
    """Whether the table's reloptions (pg_class) miss or change one of STORAGE."""
    have = dict(option.split("=", 1) for option in (reloptions or []))
    return any(have.get(name) != value for name, value in STORAGE.items())


def race(exc: Any) -> bool:
    """Whether a driver error says an init that took no lock (an older mq) made first
    what this one was making: a table, an index, a column, or a name in the catalog (a
    unique violation there, not among the queue's rows)."""
    constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
    return getattr(exc, "sqlstate", None) in DUPLICATES or constraint in CATALOG_NAMES


def set_storage(db: Executor, done: list[str]) -> list[str]:
    """After the shared migration (``done`` says what it did): the table's storage
    parameters, set where they differ; what that did."""
    rows = db._rows(db._sql["storage_read"], (f'"{db.table}"',))
    if not storage_differs(rows[0][0] if rows else None):
        return []
    db._change(db._sql["storage_set"], ())
    if any(line.startswith("created table") for line in done):
        return []
    return [f"set the table's storage parameters: {storage()}"]
