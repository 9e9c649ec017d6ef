"""Storage backends: one small interface (``base.Backend``), the SQL every dialect
shares (the modules here), and one package per database (``sqlite/``, ``mysql/``,
``postgres/``: found and registered by ``dialects``)."""

from __future__ import annotations

from mq_cli.backends import dialects
from mq_cli.backends.base import Backend
from mq_cli.backends.dialects import OpenOptions
from mq_cli.core.dburl import DatabaseSettings

dialects.discover()


def open_backend(
    settings: DatabaseSettings,
    table: str,
    *,
    create: bool | None = None,
    auto_init: bool = True,
    reading: bool = False,
    lock_dir: str = "",
    standby_ok: bool = False,
) -> Backend:
    """Connect to the database ``settings`` describe.

    ``create``: make the schema if it is missing. Default: yes for SQLite (the
    embedded default must work with zero setup), no for MySQL and PostgreSQL (`mq init` does it,
    with a user allowed to create tables). ``auto_init`` False: only make the
    SQLite file's directory, and leave creating the schema to the caller (`mq init`).
    ``reading``: for commands that only read, which create the schema only in a
    SQLite file that did not exist. ``lock_dir``: where this host's drains keep
    their lock files (SQLite tells a dead drain by its file there). ``standby_ok``:
    connect to a PostgreSQL standby too (`mq check`, which says so); otherwise a
    read-only server is refused at once.
    """
    options = OpenOptions(create, auto_init, reading, standby_ok)
    backend = dialects.get(settings.kind).open(settings, table, options)
    backend.lock_dir = lock_dir
    return backend
