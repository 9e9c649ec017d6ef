"""What callers read about a backend beside its operations: what its dialect can do
(Caps), what its table looks like (Shape), one line of `mq check` (Found)."""

from __future__ import annotations

from dataclasses import dataclass

#: one `mq check` line: (name, ok, text) or (name, ok, text, warn)
Found = tuple[str, bool, str] | tuple[str, bool, str, bool]


@dataclass(frozen=True)
class Shape:
    """What the database says the table looks like."""

    columns: frozenset[str]
    #: index name -> unique
    indexes: dict[str, bool]
    #: the schema (PostgreSQL) or database (MySQL) it is in; None where a file has one
    schema: str | None = None

    def name(self, table: str) -> str:
        """``table`` as messages name it: ``app.mq_messages``."""
        return f"{self.schema}.{table}" if self.schema else table


@dataclass(frozen=True)
class Caps:
    """What a dialect can do that others cannot: read where behaviour differs, so no
    caller tests a dialect's name (River's driver interface has the same idea)."""

    #: its drains all run on one host: a drain's liveness and its fleet slots are
    #: flocks on files (lock_dir, beside the database), not session locks or rows
    file_locks: bool = False
    #: its own consistency check is cheap enough for `mq check` (integrity())
    integrity_check: bool = False
    #: the unique-key index lives on unique_slot (schema version 2's migration)
    unique_slot: bool = False
    #: each DDL statement commits at once (MySQL): `mq init` cannot be one transaction,
    #: so its lock is a session lock held while it runs (backends/sqlschema.py)
    ddl_commits: bool = False
    #: a success's DELETE can go out now and be read at the next result
    #: (Backend.ack_success_send); else the drain does not ask, once per message
    sends_acks: bool = False
