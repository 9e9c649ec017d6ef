"""The SQLite dialect: one file on one host, zero setup (the embedded default).

``dialect.py`` (the Backend and its registration), ``url.py`` (its URL form and
the zero-config file), ``wal.py`` (noticing that the file's ``-wal``/``-shm``
were deleted under an open connection), ``sqlite.sql`` (every statement).
Importing this package declares the dialect (its URLs); its first use imports
``dialect.py``, which registers the rest.
"""

from __future__ import annotations

from typing import Any

from mq_cli.backends import dialects
from mq_cli.backends.sqlite import url

dialects.declare(url.FORM, "mq_cli.backends.sqlite.dialect")

__all__ = ["SqliteBackend"]


def __getattr__(name: str) -> Any:
    if name == "SqliteBackend":
        from mq_cli.backends.sqlite.dialect import SqliteBackend

        return SqliteBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
