"""Storage backends: one small interface (``base.Backend``), one module per database."""

from __future__ import annotations

from ..dburl import DatabaseSettings
from .base import Backend


def open_backend(
    settings: DatabaseSettings, table: str, *, create: bool | None = None, auto_init: bool = True
) -> Backend:
    """Connect to the database ``settings`` describe.

    ``create``: make the schema if it is missing. Default: yes for SQLite (the
    embedded default must work with zero setup), no for MySQL and PostgreSQL (`mq init` does it,
    with a user allowed to create tables). ``auto_init`` False: only make the
    SQLite file's directory, and leave creating the schema to the caller (`mq init`).
    """
    if settings.kind == "sqlite":
        from .sqlite import SqliteBackend

        create = True if create is None else create
        return SqliteBackend(settings, table, create=create, auto_init=auto_init)
    if settings.kind == "postgres":
        from .postgres import PostgresBackend

        return PostgresBackend(settings, table, create=bool(create) and auto_init)
    from .mysql import MysqlBackend

    return MysqlBackend(settings, table, create=bool(create) and auto_init)
