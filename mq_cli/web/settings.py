"""The config's `web:` section: the console's users, its secret key and its audit log.

::

    web:
      users:
        alice: {password_hash: "scrypt:32768:8:1$...", role: operator}
        bob:   {password_hash: "pbkdf2:sha256:...", role: viewer}
      secret_key_file: /etc/mq/web-secret   # or secret_key: ...; else random per process
      audit_log: /var/log/mq/console.jsonl  # default: $XDG_STATE_HOME/mq/console-audit.jsonl

Every error names the key and its line, as the rest of the config does (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mq_cli.core.config import Config
from mq_cli.core.errors import ConfigError

ROLES = ("viewer", "operator")
WEB_KEYS = ("users", "secret_key", "secret_key_file", "audit_log")
USER_KEYS = ("password_hash", "role")
#: the methods werkzeug's generate_password_hash writes (check_password_hash reads them)
HASH_METHODS = ("scrypt:", "pbkdf2:")


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str = field(repr=False)
    role: str

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True)
class WebSettings:
    users: dict[str, User] = field(default_factory=dict)
    #: None: a random key per process (sessions and CSRF tokens end with it)
    secret_key: str | None = field(default=None, repr=False)
    audit_log: str = ""


def default_audit_log() -> str:
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state_home, "mq", "console-audit.jsonl")


def parse(config: Config) -> WebSettings:
    """The console's settings from ``config.web`` (None: no section, no users)."""
    where: Callable[[tuple[str, ...]], str] = config.where or (lambda path: ".".join(path))

    def error(path: tuple[str, ...], message: str) -> ConfigError:
        return ConfigError(f"{where(path)}: {message}")

    raw: Any = config.web
    if raw is None:
        return WebSettings(audit_log=default_audit_log())
    if not isinstance(raw, dict):
        raise error(("web",), "expected a mapping (users, secret_key, audit_log)")
    for key in raw:
        if key not in WEB_KEYS:
            raise error(("web", key), f"unknown key (valid: {', '.join(WEB_KEYS)})")
    users = _users(raw.get("users"), error)
    secret = raw.get("secret_key")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise error(("web", "secret_key"), "expected a string of at least 16 characters")
    secret_file = raw.get("secret_key_file")
    if secret_file is not None:
        if secret is not None:
            raise error(("web", "secret_key_file"), "give secret_key or secret_key_file, not both")
        secret = _read_secret(secret_file, where(("web", "secret_key_file")))
    audit = raw.get("audit_log") or default_audit_log()
    if not isinstance(audit, str):
        raise error(("web", "audit_log"), "expected a file path")
    return WebSettings(users, secret, os.path.expanduser(audit))


def _users(raw: Any, error: Callable[[tuple[str, ...], str], ConfigError]) -> dict[str, User]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise error(("web", "users"), "expected a mapping of user name to password_hash and role")
    users: dict[str, User] = {}
    for name, entry in raw.items():
        path = ("web", "users", str(name))
        if not isinstance(name, str) or not name or ":" in name or not name.isprintable():
            raise error(path, "a user name is printable text without ':'")
        if not isinstance(entry, dict):
            raise error(path, "expected a mapping with password_hash and role")
        for key in entry:
            if key not in USER_KEYS:
                raise error((*path, key), f"unknown key (valid: {', '.join(USER_KEYS)})")
        hashed = entry.get("password_hash")
        if not isinstance(hashed, str) or not hashed.startswith(HASH_METHODS):
            raise error(
                (*path, "password_hash"),
                "missing or not a password hash: make one with `mq web --hash-password`",
            )
        role = entry.get("role")
        if role not in ROLES:
            raise error((*path, "role"), f"expected one of {', '.join(ROLES)}, not {role!r}")
        users[name] = User(name, hashed, role)
    return users


def _read_secret(path: Any, where: str) -> str:
    if not isinstance(path, str):
        raise ConfigError(f"{where}: expected a file path")
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            secret = handle.read().strip()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    if len(secret) < 16:
        raise ConfigError(f"{where}: {path} holds fewer than 16 characters")
    return secret
