"""Who is asking, and may they act: HTTP Basic against the config's users, or the host's hook.

HTTP Basic is parsed by werkzeug (``request.authorization``) and checked with
werkzeug's ``check_password_hash``. A password hash is slow on purpose (scrypt:
tens of milliseconds), and a browser sends the header with every request, so a
header already proven is remembered by its HMAC under a per-process key: the
password itself is kept nowhere.

A host application that mounts the console may authenticate its own way: it
passes ``authenticate=callable`` to ``create_app``; the callable gets the
request and returns a :class:`Principal` or None (refused: 401).

Guessing is slowed down per address (:class:`Throttle`): after ``FAILURES``
wrong passwords from one address within ``WINDOW`` seconds, that address gets
429 at once, before any hash runs, until the window ends; a header proven
before is still let through, and other addresses are not affected. An unknown
name is checked against a decoy hash of one of the configured users' schemes
(picked by a keyed hash of the name), so that it takes as long as a known one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mq_cli.web.settings import ROLES, User

REALM = "mq console"
#: proven headers remembered at most; the oldest is forgotten first
REMEMBERED = 256
#: wrong passwords from one address within WINDOW seconds before it must wait
FAILURES = 5
WINDOW = 60.0
#: addresses whose failures are kept at most; the oldest is forgotten first
TRACKED = 4096
#: where a request that failed to log in leaves the name it tried (for the audit record)
FAILED_NAME = "mq.login_failed"


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


class TooManyFailures(Exception):
    """This address failed to log in too often: 429, ``retry_after`` seconds.
    ``first``: the first such answer of this window (the one worth a log line)."""

    def __init__(self, retry_after: int, first: bool):
        super().__init__(f"too many failed logins from this address: try again in {retry_after} s")
        self.retry_after = retry_after
        self.first = first


class Throttle:
    """Failed logins per address in a fixed window (a monotonic clock)."""

    def __init__(self, failures: int = FAILURES, window: float = WINDOW):
        self.failures = failures
        self.window = window
        # address -> [failures, first failure at, refused since]
        self._seen: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def check(self, address: str) -> None:
        """Raise :class:`TooManyFailures` if ``address`` must wait before it tries again."""
        now = time.monotonic()
        with self._lock:
            found = self._seen.get(address)
            if found is None or found[0] < self.failures:
                return
            if now - found[1] >= self.window:
                del self._seen[address]
                return
            first, found[2] = not found[2], True
        raise TooManyFailures(max(1, int(found[1] + self.window - now + 0.999)), first)

    def failed(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            found = self._seen.pop(address, None)
            if found is None or now - found[1] >= self.window:
                found = [0, now, False]
            if len(self._seen) >= TRACKED:
                self._seen.pop(next(iter(self._seen)))
            found[0] += 1
            self._seen[address] = found


def method_of(password_hash: str) -> str:
    """The scheme and parameters of a werkzeug hash: ``scrypt:32768:8:1``."""
    return password_hash.split("$", 1)[0]


class BasicAuth:
    """Checks an Authorization header against the configured users."""

    def __init__(self, users: dict[str, User], throttle: Throttle | None = None):
        self.users = users
        self.throttle = throttle or Throttle()
        self._key = os.urandom(32)
        self._proven: dict[bytes, str] = {}
        self._lock = threading.Lock()
        # Checked against for an unknown name, so that it takes as long as a known one:
        # one decoy per scheme in use (a pbkdf2 hash takes longer than an scrypt one).
        from werkzeug.security import generate_password_hash

        methods = sorted({method_of(user.password_hash) for user in users.values()})
        self.decoys = [generate_password_hash(os.urandom(16).hex(), m) for m in methods] or [
            generate_password_hash(os.urandom(16).hex())
        ]

    def decoy_for(self, name: str) -> str:
        """The decoy an unknown ``name`` is checked against: always the same one."""
        digest = hmac.new(self._key, b"decoy\0" + name.encode(), hashlib.sha256).digest()
        return self.decoys[int.from_bytes(digest[:8], "big") % len(self.decoys)]

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
        address = request.remote_addr or "unknown"
        self.throttle.check(address)  # before the slow hash
        from werkzeug.security import check_password_hash

        hashed = user.password_hash if user is not None else self.decoy_for(name)
        if not check_password_hash(hashed, password) or user is None:
            self.throttle.failed(address)
            request.environ[FAILED_NAME] = name
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
