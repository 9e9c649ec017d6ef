"""The console's actions (POST, operator role, CSRF token) and the page that confirms them.

Every action that changes messages (retry or delete of one message, of the
selected ones or of all that match a filter; requeue of the stalled, `mq gc
--stalled --requeue -q Q`, or of the failed, `mq gc --errors --requeue -q Q`;
purge) is first shown on its confirmation page, ``GET /queues/Q/confirm``: what
it will do, to how many messages, with which filter or ids. That page holds the
POST form that does it, with ``upto``, the table's last id when it was shown,
so nothing enqueued after the confirmation is touched. A purge, and an action
on every message of a queue (an empty filter), also need the queue's name
typed. Ids are acted on only within the queue of the address. Each action is
one call into ``mq_cli.api`` with the CLI's semantics, and one line of the
audit log. Pause and resume change no message and need no confirmation.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from mq_cli.core.errors import ConfigError
from mq_cli.core.models import STATES
from mq_cli.core.states import Action, State
from mq_cli.web import bulk
from mq_cli.web.context import console, mq, require_operator, wants_json
from mq_cli.web.pages import ESTIMATED, current_filter

blueprint = Blueprint("actions", __name__)
CONFIRMED = (
    Action.RETRY,
    Action.DELETE,
    Action.PURGE,
    Action.REQUEUE_STALLED,
    Action.REQUEUE_FAILED,
)
REQUEUE = {State.STALLED: "mq gc --stalled --requeue", State.FAILED: "mq gc --errors --requeue"}
#: a requeue's kind -> its action in the audit log
REQUEUE_ACTION = {State.STALLED: Action.REQUEUE_STALLED, State.FAILED: Action.REQUEUE_FAILED}


def _force() -> bool:
    return request.values.get("force") in ("1", "on", "true")


def _ids() -> list[int]:
    return [bulk.parse_id(raw, "ids") for raw in request.values.getlist("ids")]


def _upto() -> int:
    raw = request.form.get("upto")
    if raw is None:
        raise ConfigError(
            "confirm first: the confirmation page says how many messages this touches "
            "(the buttons of the queue page lead there)"
        )
    return bulk.parse_id(raw, "upto")


def _typed(queue: str, what: str) -> None:
    if request.form.get("confirm") != queue:
        raise ConfigError(f"type the queue's name ({queue}) to confirm {what}")


def _status() -> State | None:
    status = request.values.get("status") or None
    if status is not None and status not in STATES:
        raise ConfigError(f"status is one of {', '.join(STATES)}, not {status!r}")
    return None if status is None else State(status)


def _back(queue: str) -> Response:
    """The queue page, with the filter the action came from."""
    chosen = current_filter()
    args: dict[str, Any] = {"state": chosen.state, "error": chosen.error, "key": chosen.unique_key}
    return redirect(url_for("pages.queue", queue=queue, **{k: v for k, v in args.items() if v}))


def _record(action: Action, queue: str, count: int, detail: str, **fields: Any) -> None:
    console().audit.record(require_operator().name, action, queue, count, detail, **fields)


@blueprint.get("/queues/<queue>/confirm")
def confirm(queue: str) -> str:
    """What the action will do and to how many messages; its POST form."""
    require_operator()
    mq().require_known(queue)
    raw = request.args.get("action", "")
    if raw not in CONFIRMED:
        raise ConfigError(f"action must be one of {', '.join(CONFIRMED)}, not {raw!r}")
    action = Action(raw)
    chosen, ids, status, force = current_filter(), _ids(), _status(), _force()
    if request.args.get("scope") == "selected" and not ids:
        raise ConfigError("no message selected: tick the messages first")
    upto = mq().last_id()  # the table's: one read; later ids are higher
    context: dict[str, Any] = {"outside": [], "missing": []}
    known = "exact"
    if action in bulk.ACTIONS and ids:
        ids, outcome = bulk.split(mq(), queue, ids)
        count, target = len(ids), url_for("actions.act", queue=queue)
        context.update(outside=outcome.not_in_queue, missing=outcome.missing)
    elif action in bulk.ACTIONS:
        count, known = bulk.count(mq(), queue, chosen, upto)
        target = url_for("actions.act", queue=queue)
    elif action == Action.PURGE:
        if status == State.PROCESSING and not force:
            raise ConfigError("purging processing messages needs force (a drain may run them)")
        kept = () if force else (State.PROCESSING, State.STALLED)  # without force no claim
        states = [status] if status else [s for s in STATES if s not in kept]
        count, known = bulk.in_states(mq(), queue, states)
        target = url_for("actions.purge", queue=queue)
    else:
        count, known = bulk.in_states(mq(), queue, [action.split("-", 1)[1]])
        target = url_for("actions.requeue", queue=queue)
    typed = action == Action.PURGE or (action in bulk.ACTIONS and not ids and bulk.empty(chosen))
    return render_template(
        "confirm.html", queue=queue, action=action, chosen=chosen, ids=ids, status=status,
        force=force, upto=upto, count=count, known=known, target=target, typed=typed,
        back=request.args.get("back", ""), requeue=REQUEUE, estimated=ESTIMATED, **context,
    )  # fmt: skip


@blueprint.post("/queues/<queue>/messages")
def act(queue: str) -> Response:
    """retry or delete: ``scope`` "selected" (ids of this queue) or "matching" (the
    filter, up to ``upto``)."""
    require_operator()
    mq().require_known(queue)
    action = bulk.check_action(request.form.get("action", ""))
    force = _force()
    fields: dict[str, Any] = {"force": force}
    ids: list[int] = []
    if request.form.get("scope") == "matching":
        chosen = current_filter()
        upto = _upto()
        if bulk.empty(chosen):
            _typed(queue, f"an action on every message of queue {queue}")
        outcome = bulk.matching(mq(), queue, action, chosen, force, upto)
        fields.update(filter=bulk.filter_json(chosen), upto=upto)
        detail = f"all matching {bulk.describe(chosen)} up to id {upto}"
    else:
        ids = _ids()
        done, outcome = bulk.by_ids(mq(), action, queue, ids, force)
        fields["ids"] = done
        detail = f"ids {' '.join(map(str, done[:50]))}{' ...' if len(done) > 50 else ''}"
    if outcome.counts():
        fields["outcome"] = outcome.counts()
        detail += "; not done: " + ", ".join(f"{k} {n}" for k, n in outcome.counts().items())
    _record(action, queue, outcome.done, f"{detail} force={force}", **fields)
    if wants_json():
        return jsonify(outcome.to_json())
    flash(outcome.summary(action, queue), "warn" if outcome.counts() else "ok")
    if request.form.get("back") == "message" and len(ids) == 1:
        if not (action == Action.DELETE and outcome.done):
            return redirect(url_for("pages.message", ident=ids[0]))
    return _back(queue)


@blueprint.post("/queues/<queue>/pause")
def pause(queue: str) -> Response:
    require_operator()
    mq().require_known(queue)
    changed = mq().pause(queue)
    _record(Action.PAUSE, queue, int(changed), "" if changed else "was paused already")
    flash(
        f"queue {queue} "
        + ("paused: drains on every host skip it" if changed else "was paused already"),
        "ok",
    )
    return _back(queue)


@blueprint.post("/queues/<queue>/resume")
def resume(queue: str) -> Response:
    require_operator()
    mq().require_known(queue)
    changed = mq().resume(queue)
    _record(Action.RESUME, queue, int(changed), "" if changed else "was not paused")
    flash(f"queue {queue} " + ("resumed" if changed else "was not paused"), "ok")
    return _back(queue)


@blueprint.post("/queues/<queue>/requeue")
def requeue(queue: str) -> Response:
    """`mq gc --stalled --requeue -q Q` (kind=stalled) or `mq gc --errors --requeue -q Q`:
    says how many went back to ready, and how many reached max_errors instead."""
    require_operator()
    mq().require_known(queue)
    raw = request.form.get("kind", "")
    if raw not in REQUEUE:
        raise ConfigError("kind is stalled or failed")
    kind = State(raw)
    report = mq().gc(kind, queues=[queue], action=Action.REQUEUE)
    changed = sum(r.changed for r in report.queues)
    failed = sum(r.now_failed for r in report.queues)
    text = f"{kind} messages of {queue}: {changed - failed} back to ready"
    if kind == State.STALLED:
        text += f"; {failed} reached max_errors and are now failed"
    _record(
        REQUEUE_ACTION[kind], queue, changed, text,
        filter={"state": kind}, outcome={State.READY: changed - failed, State.FAILED: failed},
    )  # fmt: skip
    flash(text, "warn" if failed else "ok")
    return _back(queue)


@blueprint.post("/queues/<queue>/purge")
def purge(queue: str) -> Response:
    require_operator()
    mq().require_known(queue)
    _typed(queue, "the purge")
    status, force, upto = _status(), _force(), _upto()
    deleted = mq().purge(queue, status, force=force, upto=upto)
    what = f"{status} message(s)" if status else "message(s)"
    _record(
        Action.PURGE, queue, deleted, f"status={status or 'any'} up to id {upto} force={force}",
        filter={"state": status}, upto=upto, force=force,
    )  # fmt: skip
    flash(f"deleted {deleted} {what} from queue {queue}", "ok")
    return redirect(url_for("pages.queue", queue=queue))
