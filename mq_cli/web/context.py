"""What a console's request handlers share: its settings, this request's connection and user.

Kept apart from app.py (which imports the pages) so that the pages import this,
not the module that registers them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from flask import abort, g, request

from mq_cli.api import MQ
from mq_cli.core.config import Config
from mq_cli.web.audit import AuditLog
from mq_cli.web.auth import Authenticate, Principal
from mq_cli.web.settings import WebSettings

#: idle connections kept for the next requests
POOL_SIZE = 8


class Pool:
    """Open :class:`MQ` connections, one per request at a time, reused afterwards."""

    def __init__(self, config: Config, size: int = POOL_SIZE):
        self.config = config
        self.size = size
        self._idle: list[MQ] = []
        self._lock = threading.Lock()

    def take(self) -> MQ:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return MQ(self.config)

    def give(self, mq: MQ, broken: bool) -> None:
        with self._lock:
            if not broken and len(self._idle) < self.size:
                self._idle.append(mq)
                return
        mq.close()


@dataclass
class Console:
    """What every request of one console shares (``app.extensions["mq"]``)."""

    config: Config
    settings: WebSettings
    pool: Pool
    audit: AuditLog
    read_only: bool
    authenticators: list[Authenticate]
    anonymous: Principal | None
    basic: bool  # challenge browsers for HTTP Basic credentials
    allowed_hosts: tuple[str, ...] | None = None  # None: any Host (users authenticate)

    def authenticate(self, req: Any) -> Principal | None:
        for check in self.authenticators:
            found = check(req)
            if found is not None:
                return found
        return self.anonymous


def console() -> Console:
    from flask import current_app

    found: Console = current_app.extensions["mq"]
    return found


def mq() -> MQ:
    """This request's connection."""
    if "mq" not in g:
        g.mq = console().pool.take()
        g.mq_broken = False
    found: MQ = g.mq
    return found


def require_operator() -> Principal:
    """The user, who may act here; 403 for a viewer or a read-only console."""
    user: Principal = g.user
    if console().read_only:
        abort(403, "this console is read-only (mq web --read-only)")
    if not user.can_act:
        abort(403, f"{user.name} is a viewer: actions need the operator role")
    return user


def wants_json() -> bool:
    """The API's requests (also one no route matched) and a client that asks for JSON."""
    return (
        request.blueprint == "api"
        or request.path.startswith("/api/")
        or request.accept_mimetypes.best == "application/json"
    )
