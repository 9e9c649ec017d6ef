"""`mq web` over HTTP on SQLite, MariaDB and PostgreSQL: auth (401), CSRF (403), roles (403),
the pages, the actions with the CLI's semantics, the JSON API, the refusals at start-up."""

from __future__ import annotations

import json
import re

import pytest

from tests.webconsole import (
    EVIL,
    OPERATOR,
    VIEWER,
    Server,
    basic,
    confirmation,
    count_shown,
    fail_messages,
    write_config,
)


@pytest.fixture
def console(db, tmp_path):
    write_config(tmp_path)
    server = Server(db)
    yield server
    err = server.stop()
    # nothing secret in what it printed: no password, no database URL
    for secret in (OPERATOR[1], VIEWER[1], db.url):
        assert secret not in err


def test_the_done_when_list(db, tmp_path, console):
    """401 without credentials; the overview lists the queues; /api/stats is
    `mq stats --json`; retry-all through the page makes the failed ready and a
    drain runs them; no CSRF token: 403; a viewer: 403."""
    fail_messages(db, 5)
    anonymous = console.client(None)
    refused = anonymous.get("/")
    assert refused.status == 401 and "Basic" in refused.headers["WWW-Authenticate"]
    assert console.client(("olga", "wrong")).get("/").status == 401
    assert console.client(("nobody", "x")).get("/api/stats").status == 401

    operator = console.client()
    page = operator.get("/")
    assert page.status == 200
    assert 'data-queue="mail"' in page.body and 'data-queue="thumbs"' in page.body
    assert operator.get("/api/stats").json() == json.loads(db.run("stats", "--json").output)
    assert operator.get("/api/stats").body.index('"ready"') < operator.get("/api/stats").body.index(
        '"failed"'
    )  # the CLI's key order

    form = {"scope": "matching", "action": "retry", "state": "failed"}
    assert operator.post("/queues/mail/messages", form).status == 403  # no token
    viewer = console.client(VIEWER)
    assert (
        viewer.post("/queues/mail/messages", {**form, "csrf_token": viewer.token()}).status == 403
    )
    assert json.loads(db.run("stats", "--json").output)["mail"]["failed"] == 5

    # an action without its confirmation (no upto): refused, nothing changed
    assert (
        operator.post("/queues/mail/messages", {**form, "csrf_token": operator.token()}).status
        == 400
    )
    assert json.loads(db.run("stats", "--json").output)["mail"]["failed"] == 5
    fields, target, shown = confirmation(operator, "/queues/mail/confirm?action=retry&state=failed")
    assert count_shown(shown) == ("exact", 5)
    done = operator.post(target, {**fields, "csrf_token": operator.token()})
    assert done.status == 200 and "requeued 5 message(s)" in done.body  # the redirect's page
    counts = json.loads(db.run("stats", "--json").output)["mail"]
    assert (counts["ready"], counts["failed"]) == (5, 0)
    ran = db.run("drain", "-q", "mail", "--handler", "tests.handlers:ok")
    assert ran.exit_code == 0, ran.output
    assert json.loads(db.run("stats", "--json").output)["mail"]["ready"] == 0
    actions = operator.get("/api/actions").json()
    assert actions[0]["who"] == "olga" and actions[0]["action"] == "retry"
    assert actions[0]["count"] == 5 and actions[0]["queue"] == "mail"


def test_every_page_answers_and_escapes_what_it_shows(db, tmp_path, console):
    fail_messages(db, 3)
    operator = console.client()
    listed = json.loads(db.run("list", "-q", "mail", "--json").output)
    first = listed[0]["id"]
    for path in ["/", "/queues/mail", "/queues/mail?state=failed&error=raises", f"/messages/{first}",
                 f"/messages/{first}?view=hex", f"/messages/{first}?view=text", "/runs", "/actions",
                 "/?fragment=1", "/queues/mail?fragment=1"]:  # fmt: skip
        page = operator.get(path)
        assert page.status == 200, (path, page.body)
        assert "<script>alert" not in page.body, path
        csp = page.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert re.search(r"<script>|<script [^>]*>[^<]", page.body) is None  # no inline script
        assert " style=" not in page.body
    shown = operator.get(f"/messages/{first}").body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
    assert operator.get("/messages/999999").status == 404
    assert operator.get("/queues/no-such-queue").status == 400


def test_the_api_answers_as_the_cli_does(db, tmp_path, console):
    fail_messages(db, 3)
    operator = console.client()
    cli_list = json.loads(db.run("list", "-q", "mail", "--status", "failed", "--json").output)
    assert operator.get("/api/messages?queue=mail&state=failed").json() == cli_list
    first = cli_list[0]["id"]
    shown = json.loads(db.run("show", str(first), "--json").output)
    assert operator.get(f"/api/messages/{first}").json() == shown
    assert shown["payload"] == json.dumps(EVIL)
    token = operator.get("/api/csrf").json()["csrf_token"]
    body = json.dumps({"ids": [first]}).encode()
    answer = operator.opener.open(
        _json_request(console.base + "/api/messages/retry", body, token), timeout=60
    )
    assert json.loads(answer.read())["done"] == 1
    answer = operator.opener.open(
        _json_request(
            console.base + "/api/messages/delete",
            json.dumps({"queue": "mail", "state": "failed"}).encode(),
            token,
        ),
        timeout=60,
    )
    assert json.loads(answer.read())["done"] == 2
    counts = json.loads(db.run("stats", "--json").output)["mail"]
    assert (counts["ready"], counts["failed"]) == (1, 0)


def _json_request(url: str, body: bytes, token: str):
    import urllib.request

    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Authorization", basic(OPERATOR))
    req.add_header("Content-Type", "application/json")
    req.add_header("X-CSRFToken", token)
    return req


def test_pause_resume_requeue_and_purge_with_its_typed_confirmation(db, tmp_path, console):
    fail_messages(db, 2)
    operator = console.client()
    token = operator.token("/queues/mail")
    assert operator.post("/queues/mail/pause", {"csrf_token": token}).status == 200
    assert json.loads(db.run("stats", "--json").output)["mail"]["paused"] is True
    assert operator.post("/queues/mail/resume", {"csrf_token": token}).status == 200
    assert json.loads(db.run("stats", "--json").output)["mail"]["paused"] is False
    fields, target, shown = confirmation(operator, "/queues/mail/confirm?action=requeue-failed")
    assert count_shown(shown) == ("exact", 2)
    requeued = operator.post(target, {**fields, "csrf_token": token})
    assert "failed messages of mail: 2 back to ready" in requeued.body
    fields, target, shown = confirmation(operator, "/queues/mail/confirm?action=purge")
    assert count_shown(shown) == ("exact", 2) and "type <strong>mail</strong>" in shown
    refused = operator.post(target, {**fields, "csrf_token": token, "confirm": "mai"})
    assert refused.status == 400 and "type the queue" in refused.body
    assert json.loads(db.run("stats", "--json").output)["mail"]["ready"] == 2
    purged = operator.post(target, {**fields, "csrf_token": token, "confirm": "mail"})
    assert "deleted 2 message(s)" in purged.body
    whats = [entry["action"] for entry in operator.get("/api/actions").json()]
    assert whats == ["purge", "requeue-failed", "resume", "pause"]


def test_a_processing_message_is_refused_unless_forced(db, tmp_path, console):
    assert db.run("enqueue", "-q", "thumbs", "1").exit_code == 0
    ident = json.loads(db.run("list", "-q", "thumbs", "--json").output)[0]["id"]
    now = db.now_sql()  # this database's clock, as SQL: a live claim of another drain
    claim = "UPDATE mq_messages SET status = 'processing', owner = 'elsewhere', heartbeat_at = "
    db.sql(claim + now + " WHERE id = %s", (ident,))
    operator = console.client()
    token = operator.token("/queues/mail")
    form = {"csrf_token": token, "scope": "selected", "action": "delete", "ids": [str(ident)]}
    refused = operator.post("/queues/thumbs/messages", form)
    assert "1 processing message(s) refused" in refused.body
    assert db.sql("SELECT id FROM mq_messages WHERE id = %s", (ident,)) == [(ident,)]
    forced = operator.post("/queues/thumbs/messages", {**form, "force": "1"})
    assert "deleted 1 message(s)" in forced.body
    assert db.sql("SELECT id FROM mq_messages WHERE id = %s", (ident,)) == []


def test_read_only_console_refuses_every_action(db, tmp_path):
    write_config(tmp_path)
    server = Server(db, "--read-only")
    try:
        operator = server.client()
        token = operator.get("/api/csrf").json()["csrf_token"]
        assert operator.post("/queues/mail/pause", {"csrf_token": token}).status == 403
        assert "Pause" not in operator.get("/queues/mail").body
    finally:
        server.stop()


# -- start-up refusals and the config (SQLite only: no database is reached) -------------


def test_a_public_address_with_no_user_is_refused(sqlite_db, tmp_path):
    result = sqlite_db.run("web", "--bind", "0.0.0.0:8765")
    assert result.exit_code == 2
    assert result.output.startswith("mq: refusing to serve 0.0.0.0:8765 with no user configured")
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "section, complaint",
    [
        ("web: {userz: {}}\n", "line 1: web.userz: unknown key"),
        ("web:\n  users:\n    al: {password_hash: 'scrypt:1$x', role: admin}\n",
         "web.users.al.role: expected one of viewer, operator, not 'admin'"),
        ("web:\n  users:\n    al: {role: viewer}\n",
         "web.users.al.password_hash: missing or not a password hash: make one with "
         "`mq web --hash-password`"),
    ],
)  # fmt: skip
def test_a_bad_web_section_is_a_clear_error(sqlite_db, tmp_path, section, complaint):
    (tmp_path / "mq.yaml").write_text(section)
    result = sqlite_db.run("web", "--bind", "127.0.0.1:0")
    assert result.exit_code == 2, result.output
    assert complaint in result.output and result.output.startswith("mq: ")


def test_hash_password_makes_a_hash_the_console_accepts(sqlite_db):
    from werkzeug.security import check_password_hash

    result = sqlite_db.run("web", "--hash-password", input="s3cret\n")
    assert result.exit_code == 0
    hashed = result.output.strip()
    assert "s3cret" not in hashed and check_password_hash(hashed, "s3cret")
    assert sqlite_db.run("web", "--hash-password", input="\n").exit_code == 2


def test_mounted_the_host_supplies_its_own_authentication(sqlite_db, tmp_path):
    """The docs' Flask example, with the hook: the host's user, not Basic."""
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    from mq_cli.core.config import load_config
    from mq_cli.web import Principal, create_app

    assert sqlite_db.run("init").exit_code == 0
    (tmp_path / "mq.yaml").write_text("queues: {mail: {handler: 'tests.handlers:ok'}}\n")

    def from_host(req):  # e.g. the host's session; here a header its proxy sets
        name = req.headers.get("X-Host-User")
        return Principal(name, "viewer") if name else None

    host = Flask("host")
    console = create_app(load_config(None, sqlite_db.url), authenticate=from_host)
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/mq": console})  # type: ignore[method-assign]
    client = host.test_client()
    assert client.get("/mq/").status_code == 401
    page = client.get("/mq/", headers={"X-Host-User": "hana"})
    assert page.status_code == 200 and b"hana (viewer)" in page.data
    assert b'href="/mq/queues/mail"' in page.data  # links stay under the mount point


# -- the docs' mount examples (docs/console.md) ----------------------------------------


def _snippets() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "console.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


@pytest.mark.parametrize("framework", ["flask", "django", "fastapi", "hook"])
def test_the_docs_mount_examples_run(sqlite_db, tmp_path, framework):
    """Each example of docs/console.md, with the test's config (Django and FastAPI come
    with the test extra, not with mq)."""
    snippet = {
        "flask": lambda s: "Flask(__name__)" in s,
        "django": lambda s: "get_wsgi_application" in s,
        "fastapi": lambda s: "FastAPI()" in s,
        "hook": lambda s: "def from_host" in s,
    }[framework]
    (code,) = [s for s in _snippets() if snippet(s)]
    if framework in ("django", "fastapi"):
        pytest.importorskip(framework)
    assert sqlite_db.run("init").exit_code == 0
    config = write_config(tmp_path, f"database: {sqlite_db.url}\n")
    if framework == "django":
        from django.conf import settings

        if not settings.configured:  # what the example's mysite.settings would hold
            settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="t" * 50)
    namespace: dict = {"__name__": "host_app"}
    exec(compile(code.replace("/etc/mq/config.yaml", str(config)), "console.md", "exec"), namespace)
    if framework == "flask":
        client = namespace["app"].test_client()
        assert client.get("/mq/api/stats").status_code == 401
        answer = client.get("/mq/api/stats", headers={"Authorization": basic(OPERATOR)})
        assert answer.status_code == 200 and "mail" in answer.get_json()
    elif framework == "django":
        from werkzeug.test import Client

        client = Client(namespace["application"])
        answer = client.get("/mq/api/stats", headers={"Authorization": basic(OPERATOR)})
        assert answer.status_code == 200 and "mail" in answer.get_json()
    elif framework == "fastapi":
        import asyncio

        import httpx

        async def ask(headers: dict) -> httpx.Response:
            transport = httpx.ASGITransport(app=namespace["app"])
            async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
                return await client.get("/mq/api/stats", headers=headers)

        assert asyncio.run(ask({})).status_code == 401
        answer = asyncio.run(ask({"Authorization": basic(OPERATOR)}))
        assert answer.status_code == 200 and "mail" in answer.json()
    elif framework == "hook":
        client = namespace["console"].test_client()
        assert client.get("/", environ_base={"REMOTE_USER": "carol"}).status_code == 200
        assert client.get("/api/stats").status_code == 401


urlpatterns: list = []  # the Django example's ROOT_URLCONF: the console is mounted beside it
