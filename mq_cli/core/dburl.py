"""Database settings: parsed from a URL or from the config's ``database:`` mapping.

A password is kept only in ``DatabaseSettings.password`` (hidden from repr) and
is never part of ``describe()``, which is what messages and logs show.

Only what every URL shares is here: each dialect module in mq_cli/backends/
registers a :class:`UrlForm` (its schemes, how its URL parses and reads back)
when ``mq_cli.backends`` is imported; core names no dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mq_cli.core.errors import ConfigError


@dataclass(frozen=True)
class DatabaseSettings:
    kind: str  # the dialect's name (a registered UrlForm's kind)
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
        return form(self.kind).describe(self)


@dataclass(frozen=True)
class UrlForm:
    """How one dialect's database URL and config mapping read. Each dialect module
    in mq_cli/backends/ registers one (backends/dialects.py); core names none."""

    kind: str  # DatabaseSettings.kind
    schemes: tuple[str, ...]
    #: how the "unsupported database URL" message names it (mysql://, mariadb://)
    shown: tuple[str, ...]
    #: (url, urlsplit's parts, the query's last values) -> settings, or ConfigError
    parse: Callable[[str, Any, dict[str, str]], DatabaseSettings]
    describe: Callable[[DatabaseSettings], str]
    #: the URL names a file: its user:password part is left as it is
    file: bool = False
    #: the netloc may list several hosts, each with its port (parse reads them)
    multi_host: bool = False
    #: the config's ``database:`` mapping: the ``kind:`` names that mean this dialect
    mapping_kinds: tuple[str, ...] = ()
    #: the mapping's kind when it names none (one dialect says so)
    mapping_default: bool = False
    #: keys of the mapping only this dialect takes: key -> (valid values, why not elsewhere)
    mapping_only: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    default_port: int = 0
    #: the database used when nothing is configured (one dialect has it)
    zero_config: Callable[[], DatabaseSettings] | None = None


_FORMS: dict[str, UrlForm] = {}
_SCHEMES: dict[str, UrlForm] = {}


def register(url_form: UrlForm) -> None:
    """Make a dialect's URL and mapping known (called as its backend module is imported)."""
    _FORMS[url_form.kind] = url_form
    for scheme in url_form.schemes:
        _SCHEMES[scheme] = url_form


def form(kind: str) -> UrlForm:
    """The registered form of dialect ``kind``."""
    try:
        return _FORMS[kind]
    except KeyError:
        raise ConfigError(f"unknown database kind {kind!r}") from None


def forms() -> list[UrlForm]:
    """Every registered form, by dialect name."""
    if not _FORMS:  # a bug, not a user's mistake: the backends register them
        raise ConfigError("no database dialect is registered: import mq_cli.backends first")
    return sorted(_FORMS.values(), key=lambda f: f.kind)


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
    """Settings for a URL of a registered dialect (``mysql://``, ``postgresql://``,
    ``sqlite://``, ...): the scheme picks the dialect, which reads the rest."""
    # Here, not at the top: the zero-config default has no URL to parse (~2 ms of start).
    from urllib.parse import parse_qs, urlsplit

    named = _SCHEMES.get(url.partition(":")[0].lower())
    if named is None or not named.file:
        url = _quote_userinfo(url)
    try:
        parts = urlsplit(url)
        found = _SCHEMES.get(parts.scheme.lower())
        # A multi-host netloc (h1:5432,h2:5433) has no one port: its dialect reads them.
        if found is None or not found.multi_host:
            parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ConfigError(f"bad database URL {redact_url(url)!r}: {exc}") from None
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if found is None:
        shown = [s for f in forms() for s in f.shown]
        raise ConfigError(
            f"unsupported database URL {redact_url(url)!r}: use "
            f"{', '.join(shown[:-1])} or {shown[-1]}"
        )
    return found.parse(url, parts, query)


def connect_timeout(url: str, query: dict[str, str]) -> float:
    try:
        connect_timeout = float(query.get("connect_timeout", 10))
    except ValueError:
        connect_timeout = -1.0
    if not 0 < connect_timeout < 3600:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: connect_timeout is seconds, e.g. 10"
        )
    return connect_timeout


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
