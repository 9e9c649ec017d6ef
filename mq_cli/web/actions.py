"""The console's actions (POST, operator role, CSRF token): each one call into ``mq_cli.api``
with the CLI's semantics, recorded in the audit log, then back to the page it came from.

retry / delete: by id, the selected ids, or all that match the queue page's filter
(bulk.py); requeue the stalled (`mq gc --stalled --requeue -q Q`) or the failed
(`mq gc --errors --requeue -q Q`); pause and resume; purge, once the queue's name
is typed to confirm it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, request, url_for
from werkzeug.wrappers import Response

from mq_cli.core.errors import ConfigError
from mq_cli.web import bulk
from mq_cli.web.context import console, mq, require_operator, wants_json
from mq_cli.web.pages import current_filter, cursor

blueprint = Blueprint("actions", __name__)
#: seconds one chunk of "all matching" runs before the page's script gets the progress
CHUNK_SECONDS = 2.0
PURGE_STATES = ("ready", "failed", "processing")


def _force() -> bool:
    return request.form.get("force") in ("1", "on", "true")


def _ids() -> list[int]:
    raw = request.form.getlist("ids")
    if not all(part.isdigit() and int(part) > 0 for part in raw):
        raise ConfigError("ids are message ids: whole numbers from 1")
    if not raw:
        raise ConfigError("no message selected")
    return [int(part) for part in raw]


def _back(queue: str) -> Response:
    """The queue page, with the filter the action came from."""
    chosen = current_filter()
    args: dict[str, Any] = {
        "state": chosen.state,
        "error": chosen.error,
        "key": chosen.unique_key,
    }
    return redirect(url_for("pages.queue", queue=queue, **{k: v for k, v in args.items() if v}))


def _record(action: str, queue: str | None, count: int, detail: str) -> None:
    console().audit.record(require_operator().name, action, queue, count, detail)


@blueprint.post("/queues/<queue>/messages")
def act(queue: str) -> Response:
    """retry or delete: ``scope`` "selected" (ids) or "matching" (the filter)."""
    require_operator()
    mq().require_known(queue)
    action = bulk.check_action(request.form.get("action", ""))
    force = _force()
    if request.form.get("scope") == "matching":
        chosen = current_filter()
        chunked = request.form.get("chunked") == "1"
        outcome = bulk.matching(
            mq(), queue, action, chosen, force, cursor(), CHUNK_SECONDS if chunked else None
        )
        detail = (
            f"all matching state={chosen.state or 'any'} error={chosen.error or ''!r} "
            f"key={chosen.unique_key or ''!r} force={force}"
        )
    else:
        ids = _ids()
        outcome = bulk.by_ids(mq(), action, ids, force)
        detail = (
            f"ids {' '.join(map(str, ids[:50]))}{' ...' if len(ids) > 50 else ''} force={force}"
        )
    if outcome.refused:
        detail += f"; refused (processing) {len(outcome.refused)}"
    _record(action, queue, outcome.done, detail)
    if wants_json():
        return jsonify(outcome.to_json())
    flash(outcome.summary(action), "warn" if outcome.refused or outcome.missing else "ok")
    return _back(queue)


@blueprint.post("/messages/<int:ident>/act")
def act_one(ident: int) -> Response:
    require_operator()
    action = bulk.check_action(request.form.get("action", ""))
    queue = mq().show(ident).queue
    outcome = bulk.by_ids(mq(), action, [ident], _force())
    _record(action, queue, outcome.done, f"id {ident} force={_force()}")
    flash(outcome.summary(action), "warn" if outcome.refused else "ok")
    if action == "delete" and outcome.done:
        return redirect(url_for("pages.queue", queue=queue))
    return redirect(url_for("pages.message", ident=ident))


@blueprint.post("/queues/<queue>/pause")
def pause(queue: str) -> Response:
    require_operator()
    mq().require_known(queue)
    changed = mq().pause(queue)
    _record("pause", queue, int(changed), "" if changed else "was paused already")
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
    _record("resume", queue, int(changed), "" if changed else "was not paused")
    flash(f"queue {queue} " + ("resumed" if changed else "was not paused"), "ok")
    return _back(queue)


@blueprint.post("/queues/<queue>/requeue")
def requeue(queue: str) -> Response:
    """`mq gc --stalled --requeue -q Q` (kind=stalled) or `mq gc --errors --requeue -q Q`."""
    require_operator()
    mq().require_known(queue)
    kind = request.form.get("kind", "")
    if kind not in ("stalled", "failed"):
        raise ConfigError("kind is stalled or failed")
    report = mq().gc(kind, queues=[queue], action="requeue")
    result = report.queues[0] if report.queues else None
    changed = result.changed if result else 0
    text = f"requeued {changed} {kind} message(s)"
    if result is not None and result.now_failed:
        text += f"; {result.now_failed} reached max_errors and are now failed"
    _record(f"requeue-{kind}", queue, changed, text)
    flash(text, "ok")
    return _back(queue)


@blueprint.post("/queues/<queue>/purge")
def purge(queue: str) -> Response:
    require_operator()
    mq().require_known(queue)
    if request.form.get("confirm") != queue:
        raise ConfigError(f"type the queue's name ({queue}) to confirm the purge")
    status = request.form.get("status") or None
    if status is not None and status not in PURGE_STATES:
        raise ConfigError(f"status is one of {', '.join(PURGE_STATES)}")
    deleted = mq().purge(queue, status, force=_force())
    what = f"{status} message(s)" if status else "message(s)"
    _record("purge", queue, deleted, f"status={status or 'any'} force={_force()}")
    flash(f"deleted {deleted} {what} from queue {queue}", "ok")
    return redirect(url_for("pages.queue", queue=queue))
