"""The console's per-drain controls: `mq stop DRAIN [--quiet]` from the run log page and
the overview's live drains, and as ``POST /api/drains/<name>/stop``.

A form's POST (operator role, CSRF token) first shows what it will do to which
drain and asks for a confirmation; the confirmed POST asks the drain through
``MQ.stop_drain`` (ops/drains.py: a request in the database, which the drain
reads within its heartbeat interval, on any host), is recorded in the audit log
and goes back to the page it came from. The JSON route takes ``{"quiet": true|false}``
(no other key) and answers `mq stop --json`'s object; its errors are JSON too.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, g, jsonify, redirect, render_template, request, url_for
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from mq_cli.core.errors import ConfigError, DatabaseError, MqError, NotFound
from mq_cli.core.states import Action
from mq_cli.ops.drains import StopAsked, matches
from mq_cli.ops.status import asked_text, seconds_text
from mq_cli.web.context import console, mq, require_operator

blueprint = Blueprint("drains", __name__)
api = Blueprint("drains_api", __name__)
#: the pages a form may go back to
BACK = {"runs": "pages.runs", "overview": "pages.overview"}
KINDS = {Action.STOP: False, Action.QUIET: True}  # the form's kind: quiet or not


def _ask(name: str, quiet: bool, how: str) -> StopAsked:
    """Ask the drain, and record it (also when refused: no such live drain)."""
    user = require_operator()
    action = Action.QUIET_DRAIN if quiet else Action.STOP_DRAIN
    try:
        asked = mq().stop_drain(name, quiet=quiet, by=f"{user.name} (console)")
    except ConfigError as exc:
        console().audit.record(user.name, action, None, 0, f"{how} drain {name}: refused: {exc}")
        raise
    detail = f"{how} drain {asked.name} run {asked.run.id} owner {asked.run.owner}"
    if asked.already:
        detail += f"; asked to stop already by {asked.already}"
    console().audit.record(user.name, action, asked.run.queue, 0 if asked.already else 1, detail)
    return asked


@blueprint.post("/drains/<name>/stop")
def stop(name: str) -> Any:
    """The form's POST: without ``confirm``, the confirmation page; with it, the request."""
    require_operator()
    raw = request.form.get("kind", "")
    if raw not in KINDS:
        raise ConfigError("kind is stop or quiet")
    kind = Action(raw)
    back = request.form.get("back", "runs")
    if back not in BACK:
        raise ConfigError("back is runs or overview")
    if request.form.get("confirm") != "1":
        status = mq().status()
        found = [run for run in status.drains if matches(run, name)]
        if not found:
            raise ConfigError(f"no live drain is named {name!r}: it ended? (see the run log)")
        run = found[-1]
        return render_template(
            "drain_stop.html", name=name, kind=kind, back=back, run=run,
            data=status.drain_json(run), asked=asked_text(run), seconds_text=seconds_text,
        )  # fmt: skip
    asked = _ask(name, KINDS[kind], "form")
    flash(asked.text() + " (the drain reads it within 2 s)", "ok")
    return redirect(url_for(BACK[back]))


@api.post("/drains/<name>/stop")
def stop_json(name: str) -> Response:
    """``{"quiet": true|false}`` (default false): `mq stop --json`'s answer."""
    require_operator()
    body = request.get_json(silent=True)
    if body is None and not request.get_data():
        body = {}
    if not isinstance(body, dict):
        raise ConfigError('the body is a JSON object: {"quiet": true} or {"quiet": false}')
    unknown = sorted(set(body) - {"quiet"})
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(map(repr, unknown))}: the only key is quiet")
    quiet = body.get("quiet", False)
    if not isinstance(quiet, bool):
        raise ConfigError("quiet is true or false")
    return jsonify(_ask(name, quiet, "api").to_json())


def _json_error(code: int, text: str) -> tuple[Response, int]:
    return jsonify(error=text), code


def _http(exc: HTTPException) -> tuple[Response, int]:
    return _json_error(exc.code or 500, exc.description or exc.name)


def _csrf(exc: CSRFError) -> tuple[Response, int]:
    return _json_error(403, f"refused: {exc.description} (get a token from /api/csrf)")


def _mq_error(exc: MqError) -> tuple[Response, int]:
    if isinstance(exc, DatabaseError):
        g.mq_broken = True
        return _json_error(503, str(exc))
    return _json_error(404 if isinstance(exc, NotFound) else 400, str(exc))


api.register_error_handler(CSRFError, _csrf)
for _code in (400, 403, 404, 405):  # by code: the app's own handlers are by code too
    api.register_error_handler(_code, _http)
api.register_error_handler(MqError, _mq_error)
blueprint.register_blueprint(api, url_prefix="/api")  # app.py registers ``blueprint``
