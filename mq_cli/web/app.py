"""The console as a WSGI application (Flask): authentication, CSRF, headers, connections.

Every request is authenticated before anything else runs (401 otherwise); every
POST then needs its CSRF token (Flask-WTF; 403 otherwise); an action needs the
operator role and a console that is not read-only (403 otherwise). Every
response carries a Content-Security-Policy without inline script or style and
with ``frame-ancestors 'none'``. The pages and the JSON API call ``mq_cli.api``
only, through a small pool of connections (:class:`Pool`).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, Response, g, jsonify, render_template, request
from flask_wtf.csrf import CSRFError, CSRFProtect

from mq_cli.core.config import Config, load_config
from mq_cli.core.errors import ConfigError, DatabaseError, MqError, NotFound
from mq_cli.web.audit import AuditLog
from mq_cli.web.auth import REALM, Authenticate, BasicAuth, Principal
from mq_cli.web.context import Console, Pool, console, wants_json
from mq_cli.web.settings import ROLES, parse

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def create_app(
    config: Config | str | None = None,
    *,
    read_only: bool = False,
    authenticate: Authenticate | None = None,
    anonymous: str | None = None,
) -> Flask:
    """The console as a WSGI application.

    ``config``: a Config, a config file's path, or None for the `mq` command's lookup
    (MQ_CONFIG, ./mq.yaml, ...; MQ_DATABASE_URL overrides the database).
    ``authenticate``: the host application's own check (request -> Principal or None),
    tried before the config's users. ``anonymous``: the role of a request nobody
    authenticated ("viewer" or "operator"; `mq web` on a loopback address with no
    user configured); by default such a request gets 401.
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
        SESSION_COOKIE_NAME="mq_console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        # the token lives as long as the session (and the process, without web.secret_key)
        WTF_CSRF_TIME_LIMIT=None,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]  # the CLI's order
    app.extensions["mq"] = Console(
        config, settings, Pool(config), AuditLog(settings.audit_log), read_only,
        authenticators, None if anonymous is None else Principal("anonymous", anonymous),
        bool(settings.users),
    )  # fmt: skip
    app.before_request(_authenticate)  # before CSRFProtect's check: 401 comes first
    CSRFProtect(app)
    app.after_request(_headers)
    app.teardown_request(_give_back)
    app.register_error_handler(CSRFError, _csrf_refused)
    app.register_error_handler(MqError, _mq_error)
    for code in (400, 403, 404, 405):
        app.register_error_handler(code, _http_error)
    from mq_cli.web import actions, find, jsonapi, pages  # find adds its routes to /api/

    app.register_blueprint(pages.blueprint)
    app.register_blueprint(find.blueprint)
    app.register_blueprint(actions.blueprint)
    app.register_blueprint(jsonapi.blueprint, url_prefix="/api")
    app.jinja_env.globals.update(read_only=read_only)
    return app


def _authenticate() -> Response | None:
    if request.endpoint == "static":
        return None
    user = console().authenticate(request)
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
    return None


def _headers(response: Response) -> Response:
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


def _csrf_refused(exc: CSRFError) -> tuple[Any, int]:
    return _error(403, f"refused: {exc.description} (reload the page and try again)")


def _http_error(exc: Any) -> tuple[Any, int]:
    return _error(exc.code, exc.description)


def _mq_error(exc: MqError) -> tuple[Any, int]:
    if isinstance(exc, DatabaseError):
        g.mq_broken = True
        return _error(503, str(exc))
    if isinstance(exc, NotFound):
        return _error(404, str(exc))
    return _error(400, str(exc))
