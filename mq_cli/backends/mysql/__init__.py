"""The MariaDB/MySQL dialect.

``dialect.py`` (the Backend and its registration), ``url.py`` (its URL forms),
``server.py`` (the session's options, what the server is), ``errors.py`` (error
codes to mq's errors), ``packet.py`` (what fits in the server's
max_allowed_packet), ``inflight.py`` (a success's DELETE sent ahead through
PyMySQL), ``mysql.sql`` (every statement). Importing this package registers the dialect.
"""

from mq_cli.backends.mysql.dialect import MysqlBackend

__all__ = ["MysqlBackend"]
