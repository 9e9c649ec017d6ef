"""The console as a WSGI application (Flask): authentication, CSRF, headers, connections.

An anonymous console first checks the Host (guard.py; 400 otherwise). Every
request is then authenticated (401 otherwise; 429 for an address that failed too
often); a POST must come from the console's own origin and carry a session made
for this user (403 otherwise), then its CSRF token (Flask-WTF; 403 otherwise); an
action needs the operator role and a console that is not read-only (403
otherwise). Every refusal is recorded in the audit log. Every response carries a
Content-Security-Policy without inline script or style and with
``frame-ancestors 'none'``. A bad input is a 400 and an unexpected error a 500,
as JSON under /api/ and as the error page elsewhere; a database error is a 503
that names no database (its detail goes to the log). The pages and the JSON API
call ``mq_cli.api`` only, through a small pool of connections (:class:`Pool`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from flask import Flask, Response, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import HTTPException

from mq_cli.core.config import Config, load_config
from mq_cli.core.errors import ConfigError, DatabaseError, MqError, NotFound
from mq_cli.core.states import Action
from mq_cli.web import guard
from mq_cli.web.audit import AuditLog
from mq_cli.web.auth import FAILED_NAME, REALM, Authenticate, BasicAuth, Principal, TooManyFailures
from mq_cli.web.context import Console, Pool, console, wants_json
from mq_cli.web.inputs import IdConverter, visible
from mq_cli.web.settings import ROLES, parse

log = logging.getLogger("mq.web")
#: the largest request body read (a form of ids, a JSON filter)
MAX_BODY = 2 * 1024 * 1024
DATABASE_DOWN = (
    "the database cannot be reached or refused the request; the console's log says why "
    "(check that the database runs and that the config's address and credentials are right)"
)

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # not no-referrer: with it Chromium sends "Origin: null" on the console's own forms,
    # which the origin check refuses; same-origin still tells other sites nothing
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def create_app(
    config: Config | str | None = None,
    *,
    read_only: bool = False,
    authenticate: Authenticate | None = None,
    anonymous: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    cookie_name: str | None = None,
) -> Flask:
    """The console as a WSGI application.

    ``config``: a Config, a config file's path, or None for the `mq` command's lookup
    (MQ_CONFIG, ./mq.yaml, ...; MQ_DATABASE_URL overrides the database).
    ``authenticate``: the host application's own check (request -> Principal or None),
    tried before the config's users. ``anonymous``: the role of a request nobody
    authenticated ("viewer" or "operator"; `mq web` on a loopback address with no
    user configured); by default such a request gets 401. ``allowed_hosts``: the
    only Host names (without port) answered, others get 400 (`mq web` with no user:
    the loopback names and the bind address). ``cookie_name``: the session cookie's
    name (default: ``mq_console_`` and a hash of the database and table), so that
    two consoles on one host keep their own; ``__Host-`` is put before it under HTTPS.
    """
    if not isinstance(config, Config):
        # as the `mq` command finds them: MQ_CONFIG, then the lookup order; MQ_DATABASE_URL
        found = config or os.environ.get("MQ_CONFIG") or None
        config = load_config(found, os.environ.get("MQ_DATABASE_URL") or None)
    settings = parse(config)
    if anonymous is not None and anonymous not in ROLES:
        raise ConfigError(f"anonymous must be one of {', '.join(ROLES)}, not {anonymous!r}")
    authenticators: list[Authenticate] = []
    if authenticate is not None:
        authenticators.append(authenticate)
    if settings.users:
        authenticators.append(BasicAuth(settings.users))
    if not authenticators and anonymous is None:
        raise ConfigError(
            "the console has no way to authenticate: configure web.users (see "
            "`mq web --hash-password`) or pass authenticate= to create_app"
        )
    app = Flask("mq_cli.web", static_url_path="/static")
    app.config.update(
        SECRET_KEY=settings.secret_key or os.urandom(32),
        SESSION_COOKIE_NAME=cookie_name or guard.cookie_name(config),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        # the token lives as long as the session (and the process, without web.secret_key)
        WTF_CSRF_TIME_LIMIT=None,
        MAX_CONTENT_LENGTH=MAX_BODY,
    )
    app.session_interface = guard.SessionCookie()
    app.url_map.converters["int"] = IdConverter  # before the routes that use it
    app.jinja_env.finalize = visible
    app.json.sort_keys = False  # type: ignore[attr-defined]  # the CLI's order
    app.extensions["mq"] = Console(
        config, settings, Pool(config), AuditLog(settings.audit_log), read_only,
        authenticators, None if anonymous is None else Principal("anonymous", anonymous),
        bool(settings.users),
        None if allowed_hosts is None else tuple(guard.host_name(h) for h in allowed_hosts),
    )  # fmt: skip
    app.before_request(_authenticate)  # before CSRFProtect's check: 401 comes first
    CSRFProtect(app)
    app.after_request(_headers)
    app.teardown_request(_give_back)
    app.register_error_handler(CSRFError, _csrf_refused)
    app.register_error_handler(MqError, _mq_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    from mq_cli.web import actions, drains, find, jsonapi, pages  # find adds its routes to /api/

    app.register_blueprint(pages.blueprint)
    app.register_blueprint(find.blueprint)
    app.register_blueprint(actions.blueprint)
    app.register_blueprint(jsonapi.blueprint, url_prefix="/api")
    app.register_blueprint(drains.blueprint)  # and its /api/drains/ (web/drains.py)
    app.jinja_env.globals.update(read_only=read_only)
    return app


def _authenticate() -> Response | None:
    guard.check_host(console().allowed_hosts)
    if request.endpoint == "static":
        return None
    try:
        user = console().authenticate(request)
    except TooManyFailures as exc:
        if exc.first:  # once a window: a flood of guesses must not flood the log
            log.warning("logins refused from %s for %s s: too many failed", request.remote_addr,
                        exc.retry_after)  # fmt: skip
        response = _response(429, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    if FAILED_NAME in request.environ:
        guard.record(Action.LOGIN_FAILED, request.environ[FAILED_NAME], "wrong password or user")
    if user is None:
        response = (
            jsonify(error="authentication required")
            if wants_json()
            else Response(
                render_template("error.html", code=401, text="Log in to see the console.")
            )
        )
        response.status_code = 401
        if console().basic:
            response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
        return response
    g.user = user
    guard.check_origin()
    guard.check_owner(user.name)
    return None


def _headers(response: Response) -> Response:
    user = g.get("user")
    if user is not None:
        guard.own_session(user.name)
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _give_back(exc: BaseException | None) -> None:
    found = g.pop("mq", None)
    if found is not None:
        console().pool.give(found, g.pop("mq_broken", False) or exc is not None)


def _error(code: int, text: str) -> tuple[Any, int]:
    if wants_json():
        return jsonify(error=text), code
    return render_template("error.html", code=code, text=text), code


def _response(code: int, text: str) -> Response:
    body, _ = _error(code, text)
    response = body if isinstance(body, Response) else Response(body)
    response.status_code = code
    return response


def _csrf_refused(exc: CSRFError) -> tuple[Any, int]:
    guard.record(Action.REFUSED, guard.who(), f"CSRF: {exc.description}")
    return _error(403, f"refused: {exc.description} (reload the page and try again)")


def _http_error(exc: HTTPException) -> tuple[Any, int]:
    if exc.code == 403:
        guard.record(Action.REFUSED, guard.who(), exc.description or "forbidden")
    return _error(exc.code or 500, exc.description or exc.name)


def _unexpected(exc: Exception) -> tuple[Any, int]:
    log.error("%s %s failed", request.method, request.path, exc_info=exc)
    g.mq_broken = True  # its connection may be in any state: not reused
    return _error(500, "internal error: the console's log has the details")


def _mq_error(exc: MqError) -> tuple[Any, int]:
    if isinstance(exc, DatabaseError):
        g.mq_broken = True
        log.error("%s %s: %s", request.method, request.path, exc)
        return _error(503, DATABASE_DOWN)
    if isinstance(exc, NotFound):
        return _error(404, str(exc))
    return _error(400, str(exc))
