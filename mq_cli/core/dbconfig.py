"""The config's ``database:`` key: a URL or a mapping, its password from the file,
a file of its own or the environment; and the warning for a password others can read."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import Any

from mq_cli.core import dburl
from mq_cli.core.dburl import DatabaseSettings, parse_database_url
from mq_cli.core.durations import parse_duration
from mq_cli.core.errors import ConfigError
from mq_cli.core.keys import DATABASE_KEY_TABLE
from mq_cli.core.yamldoc import Located

DATABASE_KEYS = tuple(key.name for key in DATABASE_KEY_TABLE)


def database_kinds() -> dict[str, str]:
    """The mapping's ``kind`` (without a url) -> the dialect it means (each registers its own)."""
    return {name: f.kind for f in dburl.forms() for name in f.mapping_kinds}


def _read_secret_file(path: str, where: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read password file {path}: {exc.strerror}") from None


def database_settings(raw: Any, doc: Located) -> DatabaseSettings:
    """The config's ``database:``: a URL, or a mapping (url or host/port/user/database,
    a password inline, from a file or from the environment, ssl)."""
    path = ("database",)
    if isinstance(raw, str):
        try:
            return parse_database_url(raw)
        except ConfigError as exc:
            raise doc.error(path, str(exc)) from None
    if not isinstance(raw, dict):
        raise doc.error(path, "expected a URL or a mapping (url or host/port/user/database)")
    for key in raw:
        if key not in DATABASE_KEYS:
            raise doc.error((*path, key), f"unknown key (valid: {', '.join(DATABASE_KEYS)})")
    secrets = [k for k in ("password", "password_file", "password_env") if k in raw]
    if len(secrets) > 1:
        raise doc.error((*path, secrets[1]), f"give only one of {', '.join(secrets)}")
    if "url" in raw:
        try:
            settings = parse_database_url(str(raw["url"]))
        except ConfigError as exc:
            raise doc.error((*path, "url"), str(exc)) from None
        if "kind" in raw:
            raise doc.error((*path, "kind"), "give either url or kind (the url's scheme says it)")
    else:
        kinds = database_kinds()
        default = next((f.mapping_kinds[0] for f in dburl.forms() if f.mapping_default), "")
        kind = raw.get("kind", default)
        if kind not in kinds:
            raise doc.error((*path, "kind"), f"expected one of {', '.join(kinds)}")
        if not raw.get("database"):
            raise doc.error((*path, "database"), "missing: name the database")
        url_form = dburl.form(kinds[kind])
        settings = DatabaseSettings(kind=url_form.kind, port=url_form.default_port)
    changes: dict[str, Any] = {}
    # Keys that one dialect's mapping alone takes (PostgreSQL's sslmode, pooler).
    only = {key: f for f in dburl.forms() for key in f.mapping_only}
    for key, owner in only.items():
        if key not in raw:
            continue
        values, elsewhere = owner.mapping_only[key]
        if settings.kind != owner.kind:
            raise doc.error((*path, key), elsewhere)
        if raw[key] not in values:
            raise doc.error((*path, key), f"expected one of {', '.join(values)}")
        changes[key] = raw[key]
    for key in ("host", "user", "database", "unix_socket"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise doc.error((*path, key), "expected a string")
            changes[key] = raw[key]
    if "port" in raw:
        port = raw["port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise doc.error((*path, "port"), "expected a port number (1-65535)")
        changes["port"] = raw["port"]
    if "connect_timeout" in raw:
        try:
            changes["connect_timeout"] = parse_duration(raw["connect_timeout"])
        except ValueError as exc:
            raise doc.error((*path, "connect_timeout"), str(exc)) from None
    if "password" in raw:
        # YAML turns an unquoted 0123 into 83 and yes into True: str() of that
        # would be a wrong password that fails far from its cause.
        if not isinstance(raw["password"], str):
            raise doc.error((*path, "password"), "expected a string: put the password in quotes")
        changes["password"] = raw["password"]
    elif "password_file" in raw:
        changes["password"] = _read_secret_file(
            str(raw["password_file"]), doc.where((*path, "password_file"))
        )
    elif "password_env" in raw:
        name = str(raw["password_env"])
        if name not in os.environ:
            raise doc.error((*path, "password_env"), f"environment variable {name} is not set")
        changes["password"] = os.environ[name]
        changes["password_env"] = name
    if "ssl" in raw:
        ssl = raw["ssl"]
        if ssl is False:
            changes["ssl"] = False
        elif ssl is True:
            changes["ssl"] = True
        elif isinstance(ssl, dict):
            for key in ssl:
                if key not in ("ca", "verify"):
                    raise doc.error((*path, "ssl", key), "unknown key (valid: ca, verify)")
            verify = ssl.get("verify", True)
            if not isinstance(verify, bool):  # bool("no") would be True
                raise doc.error((*path, "ssl", "verify"), "expected true or false")
            ca = ssl.get("ca")
            if ca is not None and not (isinstance(ca, str) and os.path.isfile(ca)):
                raise doc.error((*path, "ssl", "ca"), f"CA file {ca!r} not found")
            changes["ssl"] = True
            changes["ssl_ca"] = ca
            changes["ssl_verify"] = verify
        else:
            raise doc.error((*path, "ssl"), "expected true, false or a mapping {ca, verify}")
    return replace(settings, **changes)


def _url_has_password(url: object) -> bool:
    # Not a ':' test: mysql://db1:3306/app has a port, not a password.
    try:
        from urllib.parse import urlsplit

        return isinstance(url, str) and urlsplit(url).password is not None
    except ValueError:
        return False


def world_readable_warning(path: str, data: dict[str, Any]) -> tuple[str, ...]:
    database = data.get("database")
    if isinstance(database, dict):
        holds_password = "password" in database or _url_has_password(database.get("url"))
    else:
        holds_password = _url_has_password(database)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ()
    if holds_password and mode & (stat.S_IRGRP | stat.S_IROTH):
        return (
            f"{path} holds a database password and is readable by other users; "
            f"run: chmod 600 {path}",
        )
    return ()
