"""The JSON API under /api/, for scripts: the shapes of the CLI's --json, the console's auth.

``GET /api/stats`` is `mq stats --json`, ``GET /api/status`` `mq status --json`
(with each queue's ``estimated``: the counts above a bound that are estimates, read
in bounded time at any size; ``?exact=1`` counts exactly, as the CLI does),
``GET /api/messages?queue=Q&state=S&limit=N`` `mq list --json` (with ``error``,
``key`` or ``after``: the queue page's filter, a page at a time; ``limit`` is at
most ``LIST_MAX``, a larger one is a 400 that says so), ``GET
/api/messages/ID`` `mq show ID --json`.

``POST /api/messages/retry`` and ``/delete`` take a JSON object of these keys
only (any other is a 400 that names it, a value of another type too):
``"queue"`` (a string) with a filter, ``"state"``, ``"error"`` (text within
last_error) and ``"key"`` (the unique key), acting on what it matches up to
the table's last id when the request came; an empty filter acts on every
message of the queue only with ``"all": true``. Or ``"ids"`` (a list of at
most 1,000 ids), with ``"queue"`` acting only on ids of that queue (the others
come back in ``"not_in_queue"``, untouched); ``"force": true`` takes
processing messages too. Each is one line of the audit log, with its filter or
ids. A POST needs the CSRF token of ``GET /api/csrf`` in an ``X-CSRFToken``
header, with the session cookie that came with it.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, jsonify, request
from flask_wtf.csrf import generate_csrf
from werkzeug.wrappers import Response

from mq_cli.core.errors import ConfigError
from mq_cli.core.states import Action, State
from mq_cli.ops.browse import Filter
from mq_cli.web import bulk
from mq_cli.web.context import console, mq, require_operator
from mq_cli.web.inputs import ID_MAX, whole

blueprint = Blueprint("api", __name__)
LIST_LIMIT = 100
#: the most messages one GET /api/messages returns (with payloads); page on with after=
LIST_MAX = 1000


def _int(name: str, default: int, low: int = 0, high: int = ID_MAX) -> int:
    raw = request.args.get(name)
    return default if raw is None else whole(name, raw, low, high)


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
    limit = _int("limit", LIST_LIMIT, 1, LIST_MAX)
    error, key = request.args.get("error"), request.args.get("key")
    if queue is not None:
        mq().require_known(queue)
    if queue is None or not (error or key or "after" in request.args):
        return jsonify(mq().list_messages(queue, state, limit).to_json())
    chosen = Filter(None if state is None else State.parse(state, "state"), error, key)
    page = mq().browse(queue, chosen, _int("after", 0), limit)
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


#: the keys a POST /api/messages/ACTION body may hold, and their JSON types
BODY_KEYS: dict[str, tuple[type, ...]] = {
    "ids": (list,), "queue": (str,), "state": (str, type(None)), "error": (str, type(None)),
    "key": (str, type(None)), "force": (bool,), "all": (bool,),
}  # fmt: skip


def _body() -> dict[str, Any]:
    """The POST's JSON object, every key known and of its type (400 otherwise)."""
    body: Any = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ConfigError('send a JSON object: {"queue": Q, "state": S} or {"ids": [...]}')
    unknown = sorted(set(body) - set(BODY_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(repr, unknown))}: the keys are "
            f"{', '.join(BODY_KEYS)} (a filter is state, error, key)"
        )
    for name, value in body.items():
        if not isinstance(value, BODY_KEYS[name]):
            kinds = " or ".join("null" if k is type(None) else k.__name__ for k in BODY_KEYS[name])
            raise ConfigError(f"{name} must be {kinds}, not {json.dumps(value)}")
    ids = body.get("ids")
    if ids is not None and not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 < i <= bulk.MAX_ID for i in ids
    ):
        raise ConfigError("ids must be a list of message ids (whole numbers from 1)")
    return body


@blueprint.post("/messages/<raw>")
def change(raw: str) -> Response:
    """retry or delete: ids (of ``queue`` if given), or a filter of ``queue`` up to the
    table's last id when the request came; an empty filter needs ``"all": true``."""
    user = require_operator()
    action = bulk.check_action(raw)
    body = _body()
    force = body.get("force", False)
    state = body.get("state") or None
    chosen = Filter(
        None if state is None else State.parse(state, "state"),
        body.get("error") or None,
        body.get("key") or None,
    )
    queue = body.get("queue")
    if queue is not None:
        mq().require_known(queue)
    fields: dict[str, Any] = {"force": force}
    if "ids" in body:
        if not bulk.empty(chosen) or "all" in body:
            raise ConfigError("ids are acted on as they are: give ids, or a filter, not both")
        done, outcome = bulk.by_ids(mq(), action, queue, body["ids"], force)
        if queue is None:  # where the ids were: one queue, else none on the audit line
            queue = next(iter(outcome.queues)) if len(outcome.queues) == 1 else None
        fields["ids"] = done
        detail = f"api ids {' '.join(map(str, done[:50]))}{' ...' if len(done) > 50 else ''}"
    else:
        if queue is None:
            raise ConfigError('give "queue" with a filter (state, error, key), or "ids"')
        if bulk.empty(chosen) and body.get("all") is not True:
            raise ConfigError(f'an empty filter acts on every message of {queue}: add "all": true')
        if body.get("all") and not bulk.empty(chosen):
            raise ConfigError(
                '"all": true is for an empty filter; a filter acts on what it matches'
            )
        upto = mq().last_id()  # the table's: one read; later ids are higher
        outcome = bulk.matching(mq(), queue, action, chosen, force, upto)
        fields.update(filter=bulk.filter_json(chosen), upto=upto)
        detail = f"api all matching {bulk.describe(chosen)} up to id {upto}"
    if outcome.counts():
        fields["outcome"] = outcome.counts()
    console().audit.record(
        user.name, action, queue, outcome.done, f"{detail} force={force}", **fields
    )
    return jsonify(outcome.to_json())


@blueprint.post("/queues/<queue>/<action>")
def queue_action(queue: str, action: str) -> Response:
    user = require_operator()
    if action not in (Action.PAUSE, Action.RESUME):
        raise ConfigError("a queue can be paused or resumed here")
    verb = Action(action)
    mq().require_known(queue)
    changed = mq().pause(queue) if verb == Action.PAUSE else mq().resume(queue)
    console().audit.record(user.name, verb, queue, int(changed), "api")
    return jsonify(queue=queue, paused=verb == Action.PAUSE, changed=changed)


@blueprint.get("/actions")
def actions() -> Response:
    return jsonify([entry.__dict__ for entry in console().audit.newest()])
