"""PostgreSQL's database URL: postgresql://user:password@h1:5432,h2:5433/db (libpq's
several hosts), ?host= a socket directory, ?sslmode=, ?target_session_attrs=,
?pooler=; and how messages show it."""

from __future__ import annotations

import os
from typing import Any

from mq_cli.core.dburl import DatabaseSettings, UrlForm, host_port, redact_url
from mq_cli.core.dburl import connect_timeout as _connect_timeout
from mq_cli.core.errors import ConfigError

SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
#: libpq's sslmode values (PostgreSQL only)
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: libpq's target_session_attrs values: which of several hosts to settle on
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
#: what sits between mq and a PostgreSQL server (README: Poolers)
POOLERS = ("auto", "none", "transaction", "session")
MISSING = (
    "a postgresql:// database needs psycopg 3, which is not installed: "
    "pip install 'mq-cli[postgres]'"
)


def parse(url: str, parts: Any, query: dict[str, str]) -> DatabaseSettings:
    """postgresql://user:password@host:5432/db, ?host=/var/run/postgresql for a socket."""
    from urllib.parse import unquote

    database = unquote(parts.path.lstrip("/")) or None
    if not database:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: name the database, "
            "e.g. postgresql://user:password@host:5432/dbname"
        )
    known = {"host", "sslmode", "sslrootcert", "connect_timeout", "target_session_attrs", "pooler"}
    unknown = set(query) - known
    if unknown:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: unknown option(s) {', '.join(sorted(unknown))}"
        )
    sslmode = query.get("sslmode")
    if sslmode is not None and sslmode not in SSLMODES:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: sslmode is one of {', '.join(SSLMODES)}"
        )
    ca = query.get("sslrootcert")
    if ca is not None and not os.path.isfile(ca):
        raise ConfigError(f"bad database URL {redact_url(url)!r}: CA file {ca} not found")
    socket_dir = query.get("host")
    if socket_dir is not None and not socket_dir.startswith("/"):
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: ?host= is a socket directory "
            "(e.g. /var/run/postgresql); put a host name before the path"
        )
    attrs = query.get("target_session_attrs")
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: target_session_attrs is one of "
            f"{', '.join(SESSION_ATTRS)}"
        )
    pooler = query.get("pooler", "auto")
    if pooler not in POOLERS:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: pooler is one of {', '.join(POOLERS)}"
        )
    hosts = _hosts(url, parts.netloc)
    if len(hosts) > 1 and socket_dir is not None:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: give several hosts or ?host= "
            "(a socket directory), not both"
        )
    host, port = hosts[0] if hosts else ("127.0.0.1", 5432)
    return DatabaseSettings(
        kind="postgres",
        host=host,
        port=port,
        hosts=tuple(hosts) if len(hosts) > 1 else (),
        target_session_attrs=attrs,
        pooler=pooler,
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
        unix_socket=socket_dir,
        ssl=ca is not None or sslmode not in (None, "disable"),
        ssl_ca=ca,
        ssl_verify=sslmode in (None, "verify-ca", "verify-full"),
        sslmode=sslmode,
        connect_timeout=_connect_timeout(url, query),
    )


def _hosts(url: str, netloc: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a libpq netloc: ``h1:5432,[::1]:5433,h3`` (port 5432
    where none is given)."""
    from urllib.parse import unquote

    listed = netloc.rpartition("@")[2]
    if not listed:
        return []
    found = []
    for item in listed.split(","):
        if item.startswith("["):  # [2001:db8::1]:5432
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else rest
        else:
            host, _, port_text = item.partition(":")
        port = int(port_text) if port_text.isdigit() else -1
        if not host or (port_text and not 0 < port < 65536):
            raise ConfigError(
                f"bad database URL {redact_url(url)!r}: {item!r} is not host or host:port "
                "(several hosts: h1:5432,h2:5432)"
            )
        found.append((unquote(host), port if port_text else 5432))
    return found


def describe(settings: DatabaseSettings) -> str:
    who = f"{settings.user}@" if settings.user else ""
    where = ",".join(host_port(h, p) for h, p in settings.hosts or [(settings.host, settings.port)])
    if settings.unix_socket:
        where = f"[{settings.unix_socket}]:{settings.port}"
    attrs = f"?target_session_attrs={settings.target_session_attrs}"
    return f"postgresql://{who}{where}/{settings.database or ''}" + (
        attrs if settings.target_session_attrs else ""
    )


FORM = UrlForm(
    kind="postgres",
    schemes=SCHEMES,
    shown=("postgresql://",),
    parse=parse,
    describe=describe,
    multi_host=True,
    mapping_kinds=("postgresql", "postgres"),
    mapping_only={
        "sslmode": (SSLMODES, "only for PostgreSQL (MySQL: ssl)"),
        "pooler": (POOLERS, "only for PostgreSQL (README: Poolers)"),
    },
    default_port=5432,
)
