"""The MariaDB/MySQL dialect.

``dialect.py`` (the Backend and its registration), ``url.py`` (its URL forms),
``server.py`` (the session's options, what the server is), ``errors.py`` (error
codes to mq's errors), ``packet.py`` (what fits in the server's
max_allowed_packet), ``inflight.py`` (a success's DELETE sent ahead through
PyMySQL), ``mysql.sql`` (every statement). Importing this package declares the
dialect (its URLs); its first use imports ``dialect.py``, which registers the rest.
"""

from __future__ import annotations

from typing import Any

from mq_cli.backends import dialects
from mq_cli.backends.mysql import url

dialects.declare(url.FORM, "mq_cli.backends.mysql.dialect")

__all__ = ["MysqlBackend"]


def __getattr__(name: str) -> Any:
    if name == "MysqlBackend":
        from mq_cli.backends.mysql.dialect import MysqlBackend

        return MysqlBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
