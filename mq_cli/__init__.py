"""mq: a message queue in your database, drained by cron.

The Python API for producers::

    import mq_cli
    with mq_cli.connect() as mq:                      # config lookup, or database="mysql://..."
        mq.enqueue("thumbnails", {"path": "/img/1.jpg"})

    # inside your own transaction (PyMySQL or sqlite3): mq neither commits nor rolls back
    mq_cli.enqueue("thumbnails", {"path": "/img/1.jpg"}, connection=conn)
"""

from __future__ import annotations

from mq_cli.core.errors import (  # noqa: E402
    CommitUnknown,
    ConfigError,
    DatabaseError,
    HandlerNotFound,
    InputRejected,
    MqError,
    NotFound,
    PayloadTooLarge,
    SchemaMissing,
)
from mq_cli.core.version import SCHEMA_VERSION as SCHEMA_VERSION
from mq_cli.core.version import __version__ as __version__


def __getattr__(name: str) -> object:
    # The API pulls in the backends; keep `import mq_cli` (and so `mq --help`) light.
    if name == "current_message":
        from mq_cli.runners.handlers import current_message

        return current_message
    if name in ("MQ", "connect", "enqueue"):
        from mq_cli import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = [
    "MQ",
    "CommitUnknown",
    "ConfigError",
    "DatabaseError",
    "HandlerNotFound",
    "InputRejected",
    "MqError",
    "NotFound",
    "PayloadTooLarge",
    "SchemaMissing",
    "connect",
    "current_message",
    "enqueue",
]
