"""The queue table's expected shape, its check, and `mq init`'s migrations.

Every command but `init` and `check` calls :func:`verify` once per process (a
version read and two catalogue reads), before it claims or enqueues anything:
a table from a newer mq, one that an older layout left unmigrated, or one that
lost a column or an index is refused with what to do, instead of half-working
(a drain that claims, runs the handler and then cannot record the result; a
unique key that is no longer enforced).

Schema versions:

- 0: a table made before the version was recorded (no meta row, or '0'). On
  MySQL its unique_key was utf8mb4 text, whose collation padded and folded keys.
- 1: the version recorded; MySQL's unique index over (queue, unique_key).
- 2: this layout (<dialect>/<dialect>.sql, create_table). On MySQL the unique index
  is over unique_slot, CONCAT(queue, ':', unique_key), NULL without a key:
  Galera certifies every write by its unique index values, NULL parts
  included, so (queue, NULL) made every write of a queue conflict with every
  concurrent write from another node. SQLite is unchanged. PostgreSQL
  tables start at this version.
- 3: the run log: tables ``{table}_runs`` and ``{table}_rollup``
  (mq_cli/drain/runlog.py); the queue table is unchanged. A drain never fails for
  want of them, so :func:`problems` does not look for them; `mq init` restores
  them.
- 4: messages not due yet (a delay, a retry's backoff, a dead drain's grace)
  are stored with status 'delayed', beside the index ``{table}_due`` by which
  drains make them 'ready' when due; claims read ready rows only, so their cost
  does not grow with the rows they cannot take. Users still see such messages
  as ready (delayed until their time), as before.
- 5: the run log's ``{table}_runs`` rows hold an operator's request to a live
  drain (`mq stop`: ``stop_request``, ``stop_by``, ``stop_at``), which the drain
  reads, and why each run ended (``end_reason``).

The fleet limits' tables ``{table}_slots`` and ``{table}_rates`` (max_drains
without session locks, rate_limit: mq_cli/host/fleet.py, mq_cli/drain/ratelimit.py) came
without a version of their own: like the run log's, `mq init` makes or restores
them on a table of any version; a drain of a rate-limited queue refuses to run
without them.

A migration step ``n`` takes a table from version n to n + 1; after the steps,
:func:`migrate` restores any missing column or index, then records the version.
"""

from __future__ import annotations

from collections.abc import Callable

from mq_cli.backends.base import Backend
from mq_cli.backends.traits import Shape
from mq_cli.core.errors import DatabaseError, SchemaMismatch, SchemaMissing
from mq_cli.core.version import SCHEMA_VERSION

#: every column a command reads or writes, in table order
COLUMNS = (
    "id", "queue", "status", "priority", "available_at", "created_at", "heartbeat_at",
    "owner", "error_count", "last_error", "unique_key", "payload",
)  # fmt: skip
#: columns whose loss cannot be repaired: a message without them is no message
IRREPLACEABLE = ("id", "queue", "payload")


def index_names(table: str) -> dict[str, tuple[str, bool]]:
    """{index name: (what it is for, unique)} for the indexes mq needs."""
    return {
        f"{table}_claim": ("claims follow it", False),
        f"{table}_unique": ("it enforces --unique-key", True),
        f"{table}_due": ("delayed messages become ready by it", False),
    }


def problems(backend: Backend, shape: Shape | None = None) -> list[str]:
    """What is wrong with the schema, one sentence each; [] when all is well.

    Raises SchemaMissing when there is no queue table at all.
    """
    table = backend.table
    shape = shape or backend.table_shape()
    if shape is None:
        raise SchemaMissing(f"the queue table {table!r} does not exist: run `mq init`")
    version = backend.schema_version() or 0
    if version > SCHEMA_VERSION:
        return [
            f"schema version {version} is newer than this mq ({SCHEMA_VERSION}): upgrade mq "
            "(a newer mq made or migrated this table)"
        ]
    found = []
    named = shape.name(table)
    if version < SCHEMA_VERSION:
        found.append(
            f"schema version {version} is older than this mq ({SCHEMA_VERSION}): "
            f"run `mq init` to migrate ({'; '.join(PENDING[v] for v in range(version, SCHEMA_VERSION))})"
        )
    for column in COLUMNS + backend.extra_columns:
        if column not in shape.columns:
            found.append(f"table {named} has no column {column}: {_repair_hint(column)}")
    for name, (purpose, unique) in index_names(table).items():
        if name not in shape.indexes:
            found.append(f"table {named} has no index {name} ({purpose}): run `mq init`")
        elif unique and not shape.indexes[name]:
            found.append(f"index {name} is not unique ({purpose}): drop it and run `mq init`")
    return found


def _repair_hint(column: str) -> str:
    if column in IRREPLACEABLE:
        return (
            "it is not mq's queue table, or lost its messages (restore it from a backup; "
            "for another table, set `table:` in the config)"
        )
    return "run `mq init` to restore it"


def _not_ours(backend: Backend, shape: Shape) -> None:
    """Refuse, before `mq init` changes anything, a table that has no message in it to
    keep: one of another application's, or one that lost what no default can fill."""
    lost = [c for c in IRREPLACEABLE if c not in shape.columns]
    if lost:
        raise DatabaseError(
            f"table {shape.name(backend.table)} is not mq's queue table, or lost its messages "
            f"(it has no column {', '.join(lost)}): `mq init` changed nothing; for another "
            "table set `table:` in the config, else restore this one from a backup"
        )


def verify(backend: Backend) -> None:
    """Raise SchemaMismatch (exit 3) naming each problem, or SchemaMissing."""
    found = problems(backend)
    if found:
        raise SchemaMismatch("\n".join(found))


# -- migrations ---------------------------------------------------------------


def _step_0(backend: Backend) -> list[str]:
    """0 -> 1: the version starts being recorded; MySQL keys become bytes."""
    done = ["recorded the schema version"]
    if backend.unique_key_is_text():
        backend.run_schema("migrate_0_unique_key_bytes")
        done.append("unique_key stored as bytes (VARBINARY), as schema version 1 does")
    return done


def _step_1(backend: Backend) -> list[str]:
    """1 -> 2: MySQL's unique index moves to unique_slot (NULL without a key)."""
    if not backend.caps.unique_slot:
        return [f"nothing to change on {backend.kind}"]
    shape = backend.table_shape()
    done = []
    if shape is not None and "unique_slot" not in shape.columns:
        backend.run_schema("add_column_unique_slot")
        done.append("added column unique_slot (the unique key with its queue)")
    if backend.unique_index_columns() not in ([], ["unique_slot"]):
        backend.run_schema("drop_unique_index")
        done.append(f"dropped index {backend.table}_unique over (queue, unique_key)")
    return done  # _repair adds the index over unique_slot


def _step_2(backend: Backend) -> list[str]:
    """2 -> 3: the run log's tables."""
    return _create_runlog(backend, "created")


def _runlog_missing(backend: Backend) -> list[str]:
    return [name for name, why in backend.runlog_access().items() if why == "missing"]


def _create_runlog(backend: Backend, verb: str) -> list[str]:
    missing = _runlog_missing(backend)
    for name in backend.runlog_ddl:
        backend.run_schema(name)
    return [f"{verb} table {name} (the run log: mq status)" for name in missing]


def _step_3(backend: Backend) -> list[str]:
    """3 -> 4: messages not due yet get the status 'delayed' (_repair adds their index)."""
    backend.run_schema("migrate_3_delayed")
    return ["messages not due yet have the status 'delayed' (claims skip them)"]


def _step_4(backend: Backend) -> list[str]:
    """4 -> 5: the runs' columns for `mq stop` and why a run ended (a missing runs
    table is made whole by _repair)."""
    added = backend.runs_add_columns()
    return (
        [f"added column(s) {', '.join(added)} to {backend.table}_runs (mq stop)"] if added else []
    )


#: STEPS[n] takes a version-n table to version n + 1
STEPS: dict[int, Callable[[Backend], list[str]]] = {
    0: _step_0, 1: _step_1, 2: _step_2, 3: _step_3, 4: _step_4,
}  # fmt: skip
#: what STEPS[n] changes, as `mq init`'s hint says it
PENDING = {
    0: "records the schema version",
    1: "MySQL: moves the unique-key index",
    2: "adds the run log's tables, for mq status",
    3: "gives messages not due yet a status and an index of their own",
    4: "adds the run log's columns for mq stop",
}


def migrate(backend: Backend) -> list[str]:
    """Create or bring the schema up to this mq's version; what was done, one line each.

    Idempotent: on a current, intact schema it does nothing and returns [].
    """
    shape = backend.table_shape()
    if shape is None:
        for statement in backend.ddl():
            backend.run_schema_statement(statement)
        backend.run_schema("set_version", (str(SCHEMA_VERSION),))
        return [f"created table {backend.table} (schema version {SCHEMA_VERSION})"]
    _not_ours(backend, shape)  # before anything is created beside it (its _meta table)
    version = backend.schema_version() or 0
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"schema version {version} is newer than this mq ({SCHEMA_VERSION}): upgrade mq; "
            "`mq init` never downgrades a table"
        )
    done: list[str] = []
    backend.run_schema("create_meta")
    for step in range(version, SCHEMA_VERSION):
        done += [f"migrated {step} -> {step + 1}: {line}" for line in STEPS[step](backend)]
    done += _repair(backend, backend.table_shape() or shape)
    if version != SCHEMA_VERSION:
        backend.run_schema("set_version", (str(SCHEMA_VERSION),))
    return done


def _repair(backend: Backend, shape: Shape) -> list[str]:
    """Restore lost columns and indexes (data in a lost column is gone: defaults fill it)."""
    done = _create_runlog(backend, "restored") if _runlog_missing(backend) else []
    missing = backend.limits_missing()
    for name in backend.limits_ddl if missing else ():
        backend.run_schema(name)
    done += [f"created table {name} (max_drains, rate_limit)" for name in missing]
    for column in COLUMNS + backend.extra_columns:
        if column not in shape.columns:
            backend.run_schema(f"add_column_{column}")
            done.append(f"restored column {column} (its rows get the default)")
    indexes = (("_claim", "add_claim_index"), ("_unique", "add_unique_index"))
    for name, what in (*indexes, ("_due", "add_due_index")):
        if backend.table + name not in shape.indexes:
            try:
                backend.run_schema(what)
            except DatabaseError as exc:
                raise DatabaseError(
                    f"cannot restore index {backend.table}{name}: {exc}\n"
                    "(duplicate unique keys stored while it was missing? delete the extra "
                    "messages, then run `mq init` again)"
                ) from exc
            done.append(f"restored index {backend.table}{name}")
    return done
