"""The JSON API under /api/, for scripts: the shapes of the CLI's --json, the console's auth.

``GET /api/stats`` is `mq stats --json`, ``GET /api/status`` `mq status --json`
(with each queue's ``estimated``: the counts above a bound that are estimates, read
in bounded time at any size; ``?exact=1`` counts exactly, as the CLI does),
``GET /api/messages?queue=Q&state=S&limit=N`` `mq list --json` (with ``error``,
``key`` or ``after``: the queue page's filter, a page at a time), ``GET
/api/messages/ID`` `mq show ID --json`. ``POST /api/messages/retry`` and
``/delete`` take ``{"ids": [...]}`` or ``{"queue": Q, "state": S, ...}`` (a
filter) and ``"force": true``. A POST needs the CSRF token of ``GET /api/csrf``
in an ``X-CSRFToken`` header, with the session cookie that came with it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask_wtf.csrf import generate_csrf
from werkzeug.wrappers import Response

from mq_cli.core.errors import ConfigError
from mq_cli.ops.browse import Filter
from mq_cli.web import bulk
from mq_cli.web.context import console, mq, require_operator

blueprint = Blueprint("api", __name__)
LIST_LIMIT = 100


def _int(name: str, default: int, low: int = 0) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < low:
        raise ConfigError(f"{name} must be a whole number from {low}, not {raw!r}")
    return int(raw)


@blueprint.get("/csrf")
def csrf() -> Response:
    return jsonify(csrf_token=generate_csrf())


def _estimate() -> bool:
    """Counts in bounded time (estimates above a bound) unless ``?exact=1``."""
    exact = request.args.get("exact", "0")
    if exact not in ("0", "1"):
        raise ConfigError(f"exact must be 0 or 1, not {exact!r}")
    return exact == "0"


@blueprint.get("/stats")
def stats() -> Response:
    queue = request.args.get("queue")
    estimate = _estimate()
    if queue is not None:
        mq().require_known(queue)
    return jsonify({name: s.to_json() for name, s in mq().stats(queue, estimate).items()})


@blueprint.get("/status")
def status() -> Response:
    queue = request.args.get("queue")
    estimate = _estimate()
    if queue is not None:
        mq().require_known(queue)
    return jsonify(mq().status(queue, estimate).to_json())


@blueprint.get("/messages")
def messages() -> Response:
    from mq_cli.core.models import listed_json

    queue = request.args.get("queue")
    state = request.args.get("state") or None
    limit = _int("limit", LIST_LIMIT, 1)
    error, key = request.args.get("error"), request.args.get("key")
    if queue is not None:
        mq().require_known(queue)
    if queue is None or not (error or key or "after" in request.args):
        return jsonify(mq().list_messages(queue, state, limit).to_json())
    page = mq().browse(queue, Filter(state, error, key), _int("after", 0), limit)
    return jsonify(
        messages=[
            listed_json(m, page.states[m.id], page.activity.get(m.id)) for m in page.messages
        ],
        next_after=page.next_after,
    )


@blueprint.get("/messages/<int:ident>")
def message(ident: int) -> Response:
    found = mq().show(ident)
    state = mq().state(found)
    data = found.to_json(with_payload=True)
    data["state"] = state
    data["activity"], data["running_seconds"] = mq().activity(found, state) or (None, None)
    return jsonify(data)


@blueprint.post("/messages/<action>")
def change(action: str) -> Response:
    user = require_operator()
    bulk.check_action(action)
    body: Any = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ConfigError('send a JSON object: {"ids": [...]} or {"queue": Q, "state": S}')
    force = body.get("force") is True
    ids = body.get("ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids
        ):
            raise ConfigError("ids must be a list of message ids (whole numbers from 1)")
        outcome = bulk.by_ids(mq(), action, ids, force)
        queue, detail = None, f"api ids {' '.join(map(str, ids[:50]))} force={force}"
    else:
        queue = body.get("queue")
        if not isinstance(queue, str):
            raise ConfigError('give "ids", or "queue" with a filter')
        mq().require_known(queue)
        chosen = Filter(body.get("state"), body.get("error"), body.get("unique_key"))
        outcome = bulk.matching(mq(), queue, action, chosen, force)
        detail = f"api all matching state={chosen.state or 'any'} force={force}"
    console().audit.record(user.name, action, queue, outcome.done, detail)
    return jsonify(outcome.to_json())


@blueprint.post("/queues/<queue>/<action>")
def queue_action(queue: str, action: str) -> Response:
    user = require_operator()
    if action not in ("pause", "resume"):
        raise ConfigError("a queue can be paused or resumed here")
    mq().require_known(queue)
    changed = mq().pause(queue) if action == "pause" else mq().resume(queue)
    console().audit.record(user.name, action, queue, int(changed), "api")
    return jsonify(queue=queue, paused=action == "pause", changed=changed)


@blueprint.get("/actions")
def actions() -> Response:
    return jsonify([entry.__dict__ for entry in console().audit.newest()])
