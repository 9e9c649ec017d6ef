"""Who is asking, and may they act: HTTP Basic against the config's users, or the host's hook.

HTTP Basic is parsed by werkzeug (``request.authorization``) and checked with
werkzeug's ``check_password_hash``. A password hash is slow on purpose (scrypt:
tens of milliseconds), and a browser sends the header with every request, so a
header already proven is remembered by its HMAC under a per-process key: the
password itself is kept nowhere.

A host application that mounts the console may authenticate its own way: it
passes ``authenticate=callable`` to ``create_app``; the callable gets the
request and returns a :class:`Principal` or None (refused: 401).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mq_cli.web.settings import ROLES, User

REALM = "mq console"
#: proven headers remembered at most; the oldest is forgotten first
REMEMBERED = 256


@dataclass(frozen=True)
class Principal:
    """Someone the console has admitted: a name (for the audit record) and a role."""

    name: str
    role: str  # viewer | operator

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {self.role!r}")

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


Authenticate = Callable[[Any], "Principal | None"]


class BasicAuth:
    """Checks an Authorization header against the configured users."""

    def __init__(self, users: dict[str, User]):
        self.users = users
        self._key = os.urandom(32)
        self._proven: dict[bytes, str] = {}
        self._lock = threading.Lock()
        # Checked against for an unknown name, so that it takes as long as a known one.
        from werkzeug.security import generate_password_hash

        self._decoy = generate_password_hash(os.urandom(16).hex())

    def __call__(self, request: Any) -> Principal | None:
        auth = request.authorization
        if auth is None or auth.type != "basic" or auth.username is None:
            return None
        name, password = auth.username, auth.password or ""
        mark = hmac.new(self._key, f"{name}\0{password}".encode(), hashlib.sha256).digest()
        user = self.users.get(name)
        with self._lock:
            known = self._proven.get(mark)
        if known is not None and user is not None:
            return Principal(user.name, user.role)
        from werkzeug.security import check_password_hash

        if user is None:
            check_password_hash(self._decoy, password)
            return None
        if not check_password_hash(user.password_hash, password):
            return None
        with self._lock:
            if len(self._proven) >= REMEMBERED:
                self._proven.pop(next(iter(self._proven)))
            self._proven[mark] = name
        return Principal(user.name, user.role)


def hash_password(password: str) -> str:
    """What `mq web --hash-password` prints: werkzeug's salted scrypt hash."""
    from werkzeug.security import generate_password_hash

    return generate_password_hash(password)
