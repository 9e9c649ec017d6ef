"""The console's pages for finding messages: failures grouped by error, and the search.

``GET /queues/Q/failures`` groups a queue's failed messages by error (ops/failures.py)
with, for each group whose text selects exactly it, links to retry or delete the
group through the confirmation page (``/queues/Q/confirm?action=...&state=failed&
error=TEXT``). ``GET /search?q=`` finds messages of every queue by id, unique key or
error text (ops/search.py). The JSON API answers the same under ``/api/failures?queue=Q``
and ``/api/search?q=&after=``. Everything shown goes through Jinja's autoescape, and
stored text through :func:`~mq_cli.core.render.printable` (bidi and control characters
as escapes).
"""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, g, jsonify, render_template, request, url_for
from werkzeug.wrappers import Response

from mq_cli.backends.base import Backend
from mq_cli.core.errors import ConfigError
from mq_cli.core.models import iso
from mq_cli.core.render import error_line, printable
from mq_cli.core.states import State
from mq_cli.ops import failures, search
from mq_cli.web import jsonapi
from mq_cli.web.context import console, mq

blueprint = Blueprint("find", __name__)


def reader() -> Backend:
    """This request's backend for reads. (MQ has no public call for these reads yet:
    api.py is at the module size limit; ops is the layer below, as for browse.)"""
    return mq()._reader


def _after() -> int:
    raw = request.args.get("after", "0") or "0"
    ident = search.message_id(raw) if raw != "0" else 0
    if ident is None:
        raise ConfigError(f"after must be a message id, not {raw[:40]!r}")
    return ident


def _failures(queue: str | None) -> failures.Failures:
    if not queue:
        raise ConfigError("give the queue: ?queue=NAME")
    found = failures.groups(reader(), queue)
    if not found.groups:  # a queue with failures is known; counting it again costs seconds
        mq().require_known(queue)  # at 1M rows: only a queue without any is checked (typos)
    return found


def _search() -> search.Found:
    query = search.check_query(request.args.get("q", ""))
    return search.search(console().config, reader(), query, _after())


def confirm_link(queue: str, action: str, error: str) -> str:
    """The confirmation page of an action on the failed messages whose error holds ``error``."""
    params = {"action": action, "state": State.FAILED, "error": error}
    return url_for("pages.queue", queue=queue) + "/confirm?" + urlencode(params)


@blueprint.get("/queues/<queue>/failures")
def failures_page(queue: str) -> str:
    found = _failures(queue)
    operator = g.user.can_act and not console().read_only
    return render_template(
        "failures.html", queue=queue, found=found, operator=operator, iso=iso,
        printable=printable, confirm_link=confirm_link,
    )  # fmt: skip


@blueprint.get("/search")
def search_page() -> str:
    found = _search()
    return render_template("search.html", found=found, iso=iso, error_line=error_line)


@jsonapi.blueprint.get("/failures")
def failures_json() -> Response:
    return jsonify(_failures(request.args.get("queue")).to_json())


@jsonapi.blueprint.get("/search")
def search_json() -> Response:
    return jsonify(_search().to_json())
