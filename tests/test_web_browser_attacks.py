"""Issue 49's attacks in a real browser (Playwright driving Debian's Chromium) against
`mq web` on SQLite, MariaDB and PostgreSQL: each is refused and nothing is deleted
(`mq stats --json` unchanged).

- a cross-port cookie plant: a page on another port of 127.0.0.1 sets the viewer's
  cookie and auto-submits a purge form while the browser holds the operator's login;
- DNS rebinding: a page of ``rebind.test`` (mapped to 127.0.0.1) calls an anonymous
  console's API from its own origin, with Chromium's Private Network Access checks
  off, as Firefox and Safari behave;
- a viewer's cookie and token on an operator's request, from the console's own origin.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from html import escape
from typing import Any

import pytest

from tests.browser import browser, console, launch, playwright  # noqa: F401 (fixtures)
from tests.webconsole import OPERATOR, VIEWER, Server, fail_messages

# what Firefox and Safari lack: a public page's requests to loopback are not stopped
NO_PNA = (
    "--disable-features=PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests,"
    "LocalNetworkAccessChecks"
)


@pytest.fixture(scope="module")
def rebinding_browser(playwright) -> Iterator[Any]:
    launched = launch(playwright, "--host-resolver-rules=MAP rebind.test 127.0.0.1", NO_PNA)
    yield launched
    launched.close()


def context_as(browser: Any, base: str, user: tuple[str, str] | None = OPERATOR) -> Any:
    credentials = {"username": user[0], "password": user[1]} if user else None
    context = browser.new_context(http_credentials=credentials, base_url=base)
    context.set_default_timeout(120_000)  # a hang's deadline on a loaded machine
    return context


def stats(db) -> dict[str, Any]:
    return json.loads(db.run("stats", "--json").output)


def audit(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def viewers_pair(console: Server) -> tuple[str, str, str]:
    """What a viewer can get: the console's cookie (name, value) and its CSRF token."""
    viewer = console.client(VIEWER)
    token = viewer.get("/api/csrf").json()["csrf_token"]
    (cookie,) = [c for h in viewer.opener.handlers if hasattr(h, "cookiejar") for c in h.cookiejar]
    return cookie.name, cookie.value, token


class Planter(http.server.BaseHTTPRequestHandler):
    """Another service on this host: plants a cookie for 127.0.0.1, posts a purge form."""

    page = b""
    cookie = ""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Set-Cookie", f"{self.cookie}; Path=/")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_cookie_planted_from_another_port_cannot_purge(db, tmp_path, browser, console):
    fail_messages(db, 3)
    before = stats(db)
    name, value, token = viewers_pair(console)
    fields = {"csrf_token": token, "confirm": "mail", "status": "failed"}
    inputs = "".join(
        f'<input type="hidden" name="{k}" value="{escape(v)}">' for k, v in fields.items()
    )
    handler = type("Evil", (Planter,), {"cookie": f"{name}={value}"})
    handler.page = (
        f'<form method="post" action="{console.base}/queues/mail/purge">{inputs}</form>'
        "<script>document.forms[0].submit()</script>"
    ).encode()
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        page = context_as(browser, console.base).new_page()
        page.goto("/queues/mail")  # the operator is logged in: the browser holds the login
        assert page.locator("table.messages tbody tr").count() == 3
        with page.expect_navigation(url=f"{console.base}/queues/mail/purge"):
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert "refused" in page.inner_text("main")
        assert "deleted" not in page.inner_text("main")
    finally:
        evil.shutdown()
        evil.server_close()
    assert stats(db) == before
    (refused,) = [e for e in audit(tmp_path) if e["action"] == "refused"]
    assert refused["who"] == "olga" and "/queues/mail/purge" in refused["detail"]
    assert not [e for e in audit(tmp_path) if e["action"] == "purge"]


def test_a_viewers_token_on_an_operators_request_is_refused(db, tmp_path, browser, console):
    fail_messages(db, 3)
    before = stats(db)
    name, value, token = viewers_pair(console)
    context = context_as(browser, console.base)
    # the favicon's request, authenticated as the operator, would drop the planted cookie
    context.route("**/favicon.ico", lambda route: route.abort())
    page = context.new_page()
    page.goto("/api/stats")  # the console's own origin: only the token's owner is wrong
    context.add_cookies([{"name": name, "value": value, "url": console.base}])
    status = page.evaluate(
        """async (token) => {
            const body = new URLSearchParams({csrf_token: token, confirm: 'mail',
                                              status: 'failed'});
            return (await fetch('/queues/mail/purge', {method: 'POST', body})).status;
        }""",
        token,
    )
    assert status == 403
    assert stats(db) == before
    (refused,) = [e for e in audit(tmp_path) if e["action"] == "refused"]
    assert refused["who"] == "olga" and "another user" in refused["detail"]


def test_a_rebound_host_reaches_nothing_on_an_anonymous_console(db, tmp_path, rebinding_browser):
    (tmp_path / "mq.yaml").write_text(
        "defaults: {max_errors: 1, retry_delay: 0}\n"
        "queues: {mail: {handler: 'tests.handlers:raises'}}\n"
        f"web: {{audit_log: {tmp_path / 'audit.jsonl'}}}\n"
    )
    fail_messages(db, 3)
    before = stats(db)
    server = Server(db)
    try:
        port = server.base.rsplit(":", 1)[1]
        origin = f"http://rebind.test:{port}"
        context = context_as(rebinding_browser, origin, None)
        page = context.new_page()
        # the attacker's page, first served from the attacker's address; then the name
        # points at 127.0.0.1 and the page's requests reach the console, same-origin
        page.route(
            f"{origin}/evil.html",
            lambda route: route.fulfill(content_type="text/html", body="<h1>cats</h1>"),
        )
        page.goto(f"{origin}/evil.html")
        found = page.evaluate(
            """async () => {
                const csrf = await fetch('/api/csrf');
                const pause = await fetch('/api/queues/mail/pause', {method: 'POST'});
                const read = await fetch('/api/messages?queue=mail');
                return [csrf.status, pause.status, read.status, await read.text()];
            }"""
        )
        assert found[:3] == [400, 400, 400]
        assert "Host" in found[3] and "cats" not in found[3]
        # the same console, by its loopback name: it answers (the refusal is the Host's)
        local = context_as(rebinding_browser, server.base, None).new_page()
        assert local.goto("/api/stats").status == 200
    finally:
        server.stop()
    assert stats(db) == before and before["mail"]["paused"] is False
    refused = [e for e in audit(tmp_path) if e["action"] == "host-refused"]
    assert len(refused) == 3 and all("rebind.test" in e["detail"] for e in refused)


def test_a_misspelt_or_empty_api_filter_deletes_nothing(db, tmp_path, browser, console):
    """F3 from the operator's own page: `status` (the CLI's word) is a 400 naming it, an
    empty filter needs "all": true, and ids of another queue are not touched."""
    fail_messages(db, 3)
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1", "2").exit_code == 0
    other = json.loads(db.run("list", "-q", "mail", "--json").output)[0]["id"]

    def counts() -> dict[str, list[int]]:  # not oldest_ready_seconds: it grows meanwhile
        states = ("ready", "delayed", "processing", "stalled", "failed")
        return {q: [s[state] for state in states] for q, s in stats(db).items()}

    before = counts()
    page = context_as(browser, console.base).new_page()
    page.goto("/queues/thumbs")
    answers = page.evaluate(
        """async (other) => {
            const token = (await (await fetch('/api/csrf')).json()).csrf_token;
            const post = async (body) => {
                const answer = await fetch('/api/messages/delete', {method: 'POST',
                    headers: {'X-CSRFToken': token, 'Content-Type': 'application/json'},
                    body: JSON.stringify(body)});
                return [answer.status, await answer.json()];
            };
            return [await post({queue: 'thumbs', status: 'failed'}),
                    await post({queue: 'thumbs'}),
                    await post({queue: 'thumbs', ids: [other]})];
        }""",
        other,
    )
    (misspelt, misspelt_body), (empty, empty_body), (ids, ids_body) = answers
    assert misspelt == 400 and "status" in misspelt_body["error"]
    assert empty == 400 and '"all": true' in empty_body["error"]
    assert ids == 200 and ids_body["done"] == 0 and ids_body["not_in_queue"] == [other]
    assert counts() == before
