"""mq: a message queue in your database, drained by cron.

The Python API for producers::

    import mq_cli
    with mq_cli.connect() as mq:                      # config lookup, or database="mysql://..."
        mq.enqueue("thumbnails", {"path": "/img/1.jpg"})

    # inside your own transaction (PyMySQL or sqlite3): mq neither commits nor rolls back
    mq_cli.enqueue("thumbnails", {"path": "/img/1.jpg"}, connection=conn)
"""

from __future__ import annotations

__version__ = "0.1.0"
#: the table layout this release writes; recorded in <table>_meta by `mq init`
SCHEMA_VERSION = 4

from .errors import (  # noqa: E402
    ConfigError,
    DatabaseError,
    HandlerNotFound,
    InputRejected,
    MqError,
    NotFound,
    PayloadTooLarge,
    SchemaMissing,
)


def __getattr__(name: str) -> object:
    # The API pulls in the backends; keep `import mq_cli` (and so `mq --help`) light.
    if name == "current_message":
        from .handlers import current_message

        return current_message
    if name in ("MQ", "connect", "enqueue"):
        from . import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = [
    "MQ",
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
