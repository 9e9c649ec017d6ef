"""The session mq opens on PostgreSQL: libpq's options from the config's settings."""

from __future__ import annotations

from typing import Any

from mq_cli.backends.postgres import topology
from mq_cli.core.dburl import DatabaseSettings


def connect_options(s: DatabaseSettings) -> dict[str, Any]:
    """psycopg.connect's options: autocommit, keepalives, TLS as configured (never
    probed), several hosts in order, statements prepared only where no pooler can be."""
    options: dict[str, Any] = {
        "user": s.user or "postgres",
        "dbname": s.database,
        "port": s.port,
        "connect_timeout": max(1, round(s.connect_timeout)),
        "application_name": "mq",
        "autocommit": True,
        # Prepared on the server only where no pooler can sit in between (topology.py).
        "prepare_threshold": topology.prepare_threshold(s),
    }
    if s.password is not None:
        options["password"] = s.password
    if s.unix_socket:
        options["host"] = s.unix_socket
    else:
        # Several hosts: libpq tries them in order, and with target_session_attrs
        # settles on the one that fits (read-write: the primary after a promotion).
        hosts = s.hosts or ((s.host, s.port),)
        options["host"] = ",".join(host for host, _ in hosts)
        options["port"] = ",".join(str(port) for _, port in hosts)
        # A cut connection surfaces as an error within ~2 minutes instead of a hang.
        options.update(keepalives=1, keepalives_idle=30, keepalives_interval=10)
        options.update(keepalives_count=3, tcp_user_timeout=120_000)
    # TLS as the config says, never probed (FIELD-NOTES, trap 4: decide it, do not guess).
    if s.sslmode:
        options["sslmode"] = s.sslmode
    elif s.ssl:
        options["sslmode"] = "verify-full" if s.ssl_verify else "require"
    else:
        options["sslmode"] = "disable"
    if s.ssl_ca:
        options["sslrootcert"] = s.ssl_ca
    if s.target_session_attrs:
        options["target_session_attrs"] = s.target_session_attrs
    return options
