"""The PostgreSQL dialect (psycopg 3, imported at first use).

``dialect.py`` (the Backend and its registration), ``url.py`` (its URL forms,
several hosts), ``session.py`` (libpq's options), ``listen.py`` (LISTEN/NOTIFY
wake-ups), ``errors.py`` (SQLSTATEs to mq's errors), ``topology.py`` (what
answers behind the URL: poolers, standbys, search_path), ``horizon.py`` (what
holds the vacuum horizon), ``claims.py`` (claims, and claims that acknowledge),
``inflight.py`` (a success's DELETE sent ahead), ``schema.py`` (its part of
`mq init`), ``postgres.sql`` (every statement). Importing this package declares
the dialect (its URLs); its first use imports ``dialect.py``, which registers
the rest.
"""

from __future__ import annotations

from typing import Any

from mq_cli.backends import dialects
from mq_cli.backends.postgres import url

dialects.declare(url.FORM, "mq_cli.backends.postgres.dialect")

__all__ = ["PostgresBackend"]


def __getattr__(name: str) -> Any:
    if name == "PostgresBackend":
        from mq_cli.backends.postgres.dialect import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
