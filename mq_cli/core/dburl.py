"""Database settings: parsed from a URL or from the config's ``database:`` mapping.

A password is kept only in ``DatabaseSettings.password`` (hidden from repr) and
is never part of ``describe()``, which is what messages and logs show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mq_cli.core.errors import ConfigError

MYSQL_SCHEMES = ("mysql", "mariadb", "mysql+pymysql")
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
#: libpq's sslmode values (PostgreSQL only)
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: libpq's target_session_attrs values: which of several hosts to settle on
SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")
#: what sits between mq and a PostgreSQL server (README: Poolers)
POOLERS = ("auto", "none", "transaction", "session")


@dataclass(frozen=True)
class DatabaseSettings:
    kind: str  # "mysql", "postgres" or "sqlite"
    path: str | None = None  # sqlite file
    host: str = "127.0.0.1"
    port: int = 3306
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    #: MySQL: the socket file; PostgreSQL: the socket's directory (?host=/var/run/postgresql)
    unix_socket: str | None = None
    ssl_ca: str | None = None
    ssl_verify: bool = True
    ssl: bool = False
    connect_timeout: float = 10.0
    #: PostgreSQL: libpq's sslmode; None: from ``ssl`` (on: verify-full or require; off: disable)
    sslmode: str | None = None
    password_env: str | None = None  # the variable the password came from, kept from handlers
    #: PostgreSQL: every (host, port) of a multi-host URL, in order (libpq tries them so);
    #: empty for one host (``host``/``port``, which also hold the first of several)
    hosts: tuple[tuple[str, int], ...] = ()
    #: PostgreSQL: libpq's target_session_attrs (read-write: follow a promoted standby)
    target_session_attrs: str | None = None
    #: PostgreSQL: a pooler between mq and the server (auto: detected where certain)
    pooler: str = "auto"

    def secret_env(self) -> tuple[str, ...]:
        """Environment variables that carry this database's credentials."""
        return ("MQ_DATABASE_URL",) + ((self.password_env,) if self.password_env else ())

    def describe(self) -> str:
        """Where the database is, for messages; never includes the password."""
        if self.kind == "sqlite":
            return f"sqlite:{self.path}"
        who = f"{self.user}@" if self.user else ""
        if self.kind == "postgres":
            where = ",".join(_host_port(h, p) for h, p in self.hosts or [(self.host, self.port)])
            if self.unix_socket:
                where = f"[{self.unix_socket}]:{self.port}"
            attrs = f"?target_session_attrs={self.target_session_attrs}"
            return f"postgresql://{who}{where}/{self.database or ''}" + (
                attrs if self.target_session_attrs else ""
            )
        where = self.unix_socket or f"{self.host}:{self.port}"
        return f"mysql://{who}{where}/{self.database or ''}"


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def default_sqlite_path() -> str:
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data_home, "mq", "mq.db")


def redact_url(url: str) -> str:
    """The URL with anything that may be a password replaced by ``***``, for error messages."""
    # Not urlsplit: a malformed URL ("root:pw@host/db", no scheme) is exactly
    # the one that ends up in an error message, and urlsplit finds no password in it.
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def _quote_userinfo(url: str) -> str:
    """Percent-encode ``/ ? #`` in the user:password part, split at its last ``@``.

    A password such as ``2024/Secret`` would otherwise end the host part early:
    the parser would take the user for the host and the password for the path,
    and print it in every message that names the database.
    """
    scheme, sep, rest = url.partition("://")
    head, question, query = rest.partition("?")
    userinfo, at, hostpath = head.rpartition("@")
    if not sep or not at:
        return url
    for char, code in (("/", "%2F"), ("?", "%3F"), ("#", "%23")):
        userinfo = userinfo.replace(char, code)
    return f"{scheme}{sep}{userinfo}{at}{hostpath}{question}{query}"


def parse_database_url(url: str) -> DatabaseSettings:
    """Settings for a ``mysql://`` / ``mariadb://`` / ``postgresql://`` / ``sqlite://`` URL."""
    # Here, not at the top: the zero-config default has no URL to parse (~2 ms of start).
    from urllib.parse import parse_qs, unquote, urlsplit

    if not url.lower().startswith("sqlite:"):
        url = _quote_userinfo(url)
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        # PostgreSQL's netloc may list several hosts (h1:5432,h2:5433): parsed there.
        port = None if scheme in POSTGRES_SCHEMES else parts.port
    except ValueError as exc:
        raise ConfigError(f"bad database URL {redact_url(url)!r}: {exc}") from None
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if scheme == "sqlite":
        # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db" (SQLAlchemy's rule)
        path = url.split(":///", 1)[1] if ":///" in url else ""
        path = path.split("?", 1)[0]
        if not path:
            raise ConfigError(
                f"bad database URL {redact_url(url)!r}: give a file, e.g. sqlite:////var/lib/mq/mq.db "
                "(absolute) or sqlite:///mq.db (relative)"
            )
        return DatabaseSettings(kind="sqlite", path=unquote(path))
    if scheme in MYSQL_SCHEMES:
        database = unquote(parts.path.lstrip("/")) or None
        if not database:
            raise ConfigError(
                f"bad database URL {redact_url(url)!r}: name the database, "
                "e.g. mysql://user:password@host:3306/dbname"
            )
        unknown = set(query) - {"unix_socket", "ssl_ca", "ssl_verify", "connect_timeout"}
        for name in ("pooler", "target_session_attrs") if unknown else ():
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
        connect_timeout = _connect_timeout(url, query)
        return DatabaseSettings(
            kind="mysql",
            host=parts.hostname or "127.0.0.1",
            port=port or 3306,
            user=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            database=database,
            unix_socket=query.get("unix_socket"),
            ssl=ssl_ca is not None,
            ssl_ca=ssl_ca,
            ssl_verify=query.get("ssl_verify", "true").lower() not in ("0", "false", "no"),
            connect_timeout=connect_timeout,
        )
    if scheme in POSTGRES_SCHEMES:
        return _postgres(url, parts, query)
    raise ConfigError(
        f"unsupported database URL {redact_url(url)!r}: use mysql://, mariadb://, "
        "postgresql:// or sqlite://"
    )


def _connect_timeout(url: str, query: dict[str, str]) -> float:
    try:
        connect_timeout = float(query.get("connect_timeout", 10))
    except ValueError:
        connect_timeout = -1.0
    if not 0 < connect_timeout < 3600:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: connect_timeout is seconds, e.g. 10"
        )
    return connect_timeout


def _postgres(url: str, parts: Any, query: dict[str, str]) -> DatabaseSettings:
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
    hosts = _pg_hosts(url, parts.netloc)
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


def _pg_hosts(url: str, netloc: str) -> list[tuple[str, int]]:
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
