"""MySQL/MariaDB's database URL: mysql://user:password@host:3306/db (?unix_socket=,
?ssl_ca=, ?ssl_verify=, ?connect_timeout=), and how messages show it."""

from __future__ import annotations

import os
from typing import Any

from mq_cli.core.dburl import DatabaseSettings, UrlForm, connect_timeout, redact_url
from mq_cli.core.errors import ConfigError

SCHEMES = ("mysql", "mariadb", "mysql+pymysql")
OPTIONS = {"unix_socket", "ssl_ca", "ssl_verify", "connect_timeout"}
#: options of another dialect's URL, named as such when given here
ELSEWHERE = ("pooler", "target_session_attrs")


def parse(url: str, parts: Any, query: dict[str, str]) -> DatabaseSettings:
    from urllib.parse import unquote

    database = unquote(parts.path.lstrip("/")) or None
    if not database:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: name the database, "
            "e.g. mysql://user:password@host:3306/dbname"
        )
    unknown = set(query) - OPTIONS
    for name in ELSEWHERE if unknown else ():
        if name in unknown:
            raise ConfigError(
                f"bad database URL {redact_url(url)!r}: {name} is for PostgreSQL only"
            )
    if unknown:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: unknown option(s) {', '.join(sorted(unknown))}"
        )
    ssl_ca = query.get("ssl_ca")
    if ssl_ca is not None and not os.path.isfile(ssl_ca):
        raise ConfigError(f"bad database URL {redact_url(url)!r}: CA file {ssl_ca} not found")
    timeout = connect_timeout(url, query)
    return DatabaseSettings(
        kind="mysql",
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
        unix_socket=query.get("unix_socket"),
        ssl=ssl_ca is not None,
        ssl_ca=ssl_ca,
        ssl_verify=query.get("ssl_verify", "true").lower() not in ("0", "false", "no"),
        connect_timeout=timeout,
    )


def describe(settings: DatabaseSettings) -> str:
    who = f"{settings.user}@" if settings.user else ""
    where = settings.unix_socket or f"{settings.host}:{settings.port}"
    return f"mysql://{who}{where}/{settings.database or ''}"


FORM = UrlForm(
    kind="mysql",
    schemes=SCHEMES,
    shown=("mysql://", "mariadb://"),
    parse=parse,
    describe=describe,
    mapping_kinds=("mysql", "mariadb"),
    mapping_default=True,
    default_port=3306,
)
