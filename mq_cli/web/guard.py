"""The console's request checks before any page runs: Host, origin, the session's owner.

- **Host** (an anonymous console: `mq web` with no user): only the loopback names and
  the bind address are answered (400 otherwise), so a page of another site whose name
  was rebound to 127.0.0.1 (DNS rebinding) reaches nothing.
- **Origin**: a POST whose ``Origin`` is not the console's own, or whose
  ``Sec-Fetch-Site`` is not ``same-origin``, is 403: another port of this host or a
  sibling subdomain counts as "same site" for ``SameSite=Lax`` cookies, not as the
  same origin.
- **The session's owner**: the session (and so its CSRF token) remembers the principal
  it was made for; a request by someone else drops it, and a POST carrying it is 403.
- **The cookie**: its name is one console's (two consoles on one host keep their own),
  and under HTTPS it is ``__Host-``-prefixed and ``Secure``, with ``Path=/``.

Each refusal is one line of the audit log: who, the path, the reason, the address.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, g, has_request_context, request, session
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import BadRequest, Forbidden

from mq_cli.core.config import Config
from mq_cli.core.errors import ConfigError
from mq_cli.core.states import Action

log = logging.getLogger("mq.web")
#: the Host names an anonymous console answers, besides its bind address (any port)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: the session key that names the principal the session (and its CSRF token) belongs to
OWNER = "mq_who"
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


def cookie_name(config: Config, port: int | None = None) -> str:
    """One console's cookie name: the database and table (hashed), and the port if served."""
    digest = hashlib.sha256(f"{config.database!r}\0{config.table}".encode()).hexdigest()[:10]
    return f"mq_console_{port}_{digest}" if port is not None else f"mq_console_{digest}"


class SessionCookie(SecureCookieSessionInterface):
    """Flask's signed cookie session, ``__Host-`` and ``Secure`` when the request is HTTPS."""

    def get_cookie_name(self, app: Flask) -> str:
        name: str = app.config["SESSION_COOKIE_NAME"]
        return "__Host-" + name if _secure() else name

    def get_cookie_secure(self, app: Flask) -> bool:
        return _secure() or bool(app.config["SESSION_COOKIE_SECURE"])

    def get_cookie_path(self, app: Flask) -> str:
        return "/" if _secure() else super().get_cookie_path(app)

    def get_cookie_domain(self, app: Flask) -> str | None:
        return None if _secure() else super().get_cookie_domain(app)


def _secure() -> bool:
    return has_request_context() and request.is_secure


def host_name(host: str) -> str:
    """``Host`` without its port, lower case: ``[::1]:8765`` -> ``[::1]``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def allowed_hosts(bind_host: str) -> tuple[str, ...]:
    shown = f"[{bind_host}]" if ":" in bind_host else bind_host
    return tuple(dict.fromkeys((*LOOPBACK_HOSTS, shown.lower())))


def check_host(allowed: tuple[str, ...] | None) -> None:
    if allowed is None or host_name(request.host) in allowed:
        return
    record(Action.HOST_REFUSED, "anonymous", f"Host {request.host[:100]!r} is not this console's")
    raise BadRequest(
        f"refused: this console answers only Host {', '.join(allowed)} (it has no users; "
        "a name that points here from elsewhere may be DNS rebinding)"
    )


def check_origin() -> None:
    """403 for a POST that comes from another origin (or says so)."""
    if request.method not in UNSAFE:
        return
    origin = request.headers.get("Origin")
    fetch_site = request.headers.get("Sec-Fetch-Site")
    reason = None
    if origin is not None and not _same_origin(origin):
        reason = f"a request from another origin ({origin[:100]!r})"
    elif fetch_site is not None and fetch_site != "same-origin":
        reason = f"a request from another origin (Sec-Fetch-Site: {fetch_site[:40]!r})"
    if reason is not None:
        raise Forbidden(f"refused: {reason}")


def _same_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.path or parts.query:
        return False
    # An https page may post to a console behind a proxy that ends TLS (the console sees
    # http); the reverse would be a downgrade.
    schemes = ("https",) if request.is_secure else ("http", "https")
    return parts.scheme in schemes and parts.netloc.lower() == request.host.lower()


def check_owner(name: str) -> None:
    """Drop a session made for someone else; refuse a POST that carried one."""
    owner = session.get(OWNER)
    if not session or owner == name:
        return
    session.clear()
    if request.method in UNSAFE:
        raise Forbidden(
            "refused: this session and its token belong to another user "
            "(reload the page and try again)"
        )


def own_session(name: str) -> None:
    """After the request: a session that holds anything is marked as ``name``'s."""
    if session and session.get(OWNER) != name:
        session[OWNER] = name


def record(action: Action, who: str | None, reason: str) -> None:
    """One audit line for a refusal: who, the path, the reason, the address."""
    from mq_cli.web.context import console

    queue = (request.view_args or {}).get("queue")
    # a refused request chose these: cut, so that a line stays a line's size
    detail = f"{reason[:300]} path={request.path[:200]} from={request.remote_addr or 'unknown'}"
    try:
        console().audit.record(
            (who or "anonymous")[:100], action, queue if isinstance(queue, str) else None, 0, detail
        )
    except ConfigError as exc:  # the refusal stands; its record is missing
        log.error("%s", exc)


def who() -> str:
    user: Any = g.get("user")
    return user.name if user is not None else "anonymous"
