"""Connecting to MySQL/MariaDB: the session's options, and what the server is."""

from __future__ import annotations

import re
from typing import Any

from mq_cli.core.dburl import DatabaseSettings
from mq_cli.core.errors import ConfigError


class ServerInfo:
    """What the server supports, read once per connection."""

    def __init__(
        self, version: str, max_packet: int, increment: int, lock_mode: int, galera: bool = False
    ):
        self.version_text = version
        #: a Galera cluster node: row locks are local, conflicts come as 1213 at COMMIT
        self.galera = galera
        self.mariadb = "mariadb" in version.lower()
        match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
        self.version = tuple(int(x) for x in match.groups()) if match else (0, 0, 0)
        self.max_packet = max_packet
        self.increment = increment
        self.lock_mode = lock_mode

    @property
    def skip_locked(self) -> bool:
        return self.version >= ((10, 6, 0) if self.mariadb else (8, 0, 1))

    @property
    def returning(self) -> bool:
        return self.mariadb and self.version >= (10, 5, 0)


def session_options(s: DatabaseSettings, sql_mode: str) -> dict[str, Any]:
    """pymysql.connect's options for ``s``: the session mq's SQL is written for."""
    options: dict[str, Any] = {
        "user": s.user or "root",
        "password": s.password or "",
        "database": s.database,
        "connect_timeout": s.connect_timeout,
        "read_timeout": 120,
        "write_timeout": 120,
        "autocommit": True,
        "charset": "utf8mb4",
        # Claims under REPEATABLE READ lock rows they pass over (FIELD-NOTES, trap 2).
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        # Sent before init_command: the server's sql_mode could otherwise change
        # what mq's SQL means (ORACLE: BEGIN opens a block; EMPTY_STRING_IS_NULL:
        # a tombstone's '' payload becomes NULL).
        "sql_mode": sql_mode,
    }
    if s.unix_socket:
        options["unix_socket"] = s.unix_socket
    else:
        options["host"] = s.host
        options["port"] = s.port
    if s.ssl:
        import ssl

        try:
            context = ssl.create_default_context(cafile=s.ssl_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"database ssl: cannot use CA file {s.ssl_ca}: {exc}") from None
        if not s.ssl_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        options["ssl"] = context
    else:
        # PyMySQL otherwise probes TLS on every connect (FIELD-NOTES, trap 4).
        options["ssl_disabled"] = True
    return options
