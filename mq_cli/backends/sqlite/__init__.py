"""The SQLite dialect: one file on one host, zero setup (the embedded default).

``dialect.py`` (the Backend and its registration), ``wal.py`` (noticing that
the file's ``-wal``/``-shm`` were deleted under an open connection),
``sqlite.sql`` (every statement). Importing this package registers the dialect.
"""

from mq_cli.backends.sqlite.dialect import SqliteBackend

__all__ = ["SqliteBackend"]
