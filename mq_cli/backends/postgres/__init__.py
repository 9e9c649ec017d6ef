"""The PostgreSQL dialect (psycopg 3, imported at first use).

``dialect.py`` (the Backend and its registration), ``url.py`` (its URL forms,
several hosts), ``session.py`` (libpq's options), ``listen.py`` (LISTEN/NOTIFY
wake-ups), ``errors.py`` (SQLSTATEs to mq's errors), ``topology.py`` (what
answers behind the URL: poolers, standbys, search_path), ``horizon.py`` (what
holds the vacuum horizon), ``claims.py`` (claims, and claims that acknowledge),
``inflight.py`` (a success's DELETE sent ahead), ``schema.py`` (its part of
`mq init`), ``postgres.sql`` (every statement). Importing this package registers
the dialect.
"""

from mq_cli.backends.postgres.dialect import PostgresBackend

__all__ = ["PostgresBackend"]
