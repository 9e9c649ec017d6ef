"""The console's defences, one by one, over HTTP against real `mq web` processes (issue 49):
the CSRF token bound to the person, the origin check, a cookie per console (``__Host-``
under HTTPS), the anonymous console's Host rule and its warning, the caps, the login
backoff, 400 (never 500) for bad input, no database URL on a page, control characters
shown visibly, `mq check`'s warning, and every refusal in the audit log. The decoy
hashes and the parsers: tests/test_web_units.py."""

from __future__ import annotations

import dataclasses
import http.client
import json
import urllib.parse

import pytest

from tests.webconsole import OPERATOR, VIEWER, Server, basic, fail_messages, write_config


def stats(db) -> dict:
    return json.loads(db.run("stats", "--json").output)


def audit(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def raw(
    server: Server, method: str, path: str, source: str = "127.0.0.1", body: str = "", **headers
) -> tuple[int, dict[str, str], str]:
    """One request from ``source`` (another loopback address is another client), with
    exactly the headers given (Host included)."""
    parts = urllib.parse.urlsplit(server.base)
    conn = http.client.HTTPConnection(
        parts.hostname, parts.port, timeout=60, source_address=(source, 0)
    )
    try:
        conn.putrequest(method, path, skip_host="Host" in headers)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        data = body.encode()
        if body:
            conn.putheader("Content-Type", "application/x-www-form-urlencoded")
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read().decode()
    finally:
        conn.close()


@pytest.fixture
def console(db, tmp_path):
    write_config(tmp_path)
    server = Server(db)
    yield server
    err = server.stop()
    for secret in (OPERATOR[1], VIEWER[1], db.url):
        assert secret not in err
    assert "Traceback" not in err


@pytest.fixture
def lone(sqlite_db, tmp_path):
    """A console where the database does not matter: SQLite only."""
    write_config(tmp_path)
    server = Server(sqlite_db)
    yield server
    assert "Traceback" not in server.stop()


@pytest.fixture
def anonymous(sqlite_db, tmp_path):
    """`mq web` with no user: loopback, anyone on this host is an operator."""
    (tmp_path / "mq.yaml").write_text(
        "queues: {mail: {handler: 'tests.handlers:ok'}}\n"
        f"web: {{audit_log: {tmp_path / 'audit.jsonl'}}}\n"
    )
    server = Server(sqlite_db)
    yield server
    server.stop()


# -- F1: the token belongs to the person who got it ------------------------------------


def test_a_viewers_cookie_and_token_on_an_operators_request_is_refused(db, tmp_path, console):
    fail_messages(db, 3)
    before = stats(db)
    viewer = console.client(VIEWER)
    token = viewer.get("/api/csrf").json()["csrf_token"]
    operator = console.client(OPERATOR)
    operator.opener = viewer.opener  # the viewer's cookie, planted in the operator's browser
    form = {"csrf_token": token, "confirm": "mail", "status": "failed"}
    refused = operator.post("/queues/mail/purge", form)
    assert refused.status == 403 and "another user" in refused.body
    assert operator.post("/queues/mail/pause", {"csrf_token": token}).status == 403
    assert stats(db) == before
    # the planted session is dropped: the operator's own page mints the operator's token
    own = operator.token("/queues/mail")
    assert own != token
    assert operator.post("/queues/mail/pause", {"csrf_token": own}).status == 200
    refusals = [e for e in audit(tmp_path) if e["action"] == "refused"]
    assert [e["who"] for e in refusals] == ["olga", "olga"]
    assert "/queues/mail/purge" in refusals[0]["detail"]
    assert "another user" in refusals[0]["detail"] and "127.0.0.1" in refusals[0]["detail"]


def test_a_viewer_and_a_read_only_console_are_refused_and_recorded(db, tmp_path, console):
    viewer = console.client(VIEWER)
    token = viewer.get("/api/csrf").json()["csrf_token"]
    assert viewer.post("/queues/mail/pause", {"csrf_token": token}).status == 403
    assert stats(db)["mail"]["paused"] is False
    (entry,) = audit(tmp_path)
    assert (entry["who"], entry["action"], entry["queue"]) == ("victor", "refused", "mail")
    assert "viewer" in entry["detail"] and "/queues/mail/pause" in entry["detail"]
    # no token at all: the CSRF refusal is recorded too
    assert console.client(OPERATOR).post("/queues/mail/pause", {}).status == 403
    assert "CSRF" in audit(tmp_path)[-1]["detail"] and audit(tmp_path)[-1]["who"] == "olga"


# -- the origin check ------------------------------------------------------------------


def test_a_post_from_another_origin_is_refused(sqlite_db, tmp_path, lone):
    console = lone
    operator = console.client()
    token = operator.token("/queues/mail")
    form = {"csrf_token": token}
    for headers in (
        {"Origin": "http://127.0.0.1:1"},
        {"Origin": "null"},
        {"Origin": console.base.replace("http:", "https:") + "0"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": console.base, "Sec-Fetch-Site": "same-site"},
    ):
        refused = operator.request("POST", "/queues/mail/pause", form, **headers)
        assert refused.status == 403 and "origin" in refused.body, headers
    assert stats(sqlite_db)["mail"]["paused"] is False
    assert len([e for e in audit(tmp_path) if "origin" in e["detail"]]) == 6
    own = operator.request(
        "POST", "/queues/mail/pause", form, Origin=console.base, Sec_Fetch_Site="same-origin"
    )
    assert own.status == 200 and stats(sqlite_db)["mail"]["paused"] is True


# -- F12: one cookie per console; __Host- under HTTPS ----------------------------------


def test_two_consoles_on_one_host_keep_their_own_cookies(sqlite_db, tmp_path, lone):
    console = lone
    other = Server(sqlite_db)
    try:
        first = console.client()
        token = first.token("/queues/mail")
        second = other.client()
        second.opener = first.opener  # one browser, both consoles (cookies ignore the port)
        assert second.get("/queues/mail").status == 200
        names = {cookie.name for cookie in _jar(first)}
        assert len(names) == 2 and all(name.startswith("mq_console_") for name in names)
        assert first.post("/queues/mail/pause", {"csrf_token": token}).status == 200
    finally:
        other.stop()


def _jar(client):
    for handler in client.opener.handlers:
        if hasattr(handler, "cookiejar"):
            return list(handler.cookiejar)
    raise AssertionError("no cookie jar")


def test_under_https_the_cookie_is_host_prefixed_and_secure(sqlite_db, tmp_path):
    from mq_cli.web import create_app

    config = write_config(tmp_path, f"database: {sqlite_db.url}\n")
    app = create_app(str(config), cookie_name="mq_console_test")
    client = app.test_client()
    auth = {"Authorization": basic(OPERATOR)}
    secure = client.get("/api/csrf", base_url="https://mq.example", headers=auth)
    cookie = secure.headers["Set-Cookie"]
    assert cookie.startswith("__Host-mq_console_test=")
    assert "Secure" in cookie and "Path=/;" in cookie + ";" and "Domain" not in cookie
    plain = client.get("/api/csrf", base_url="http://127.0.0.1", headers=auth)
    assert plain.headers["Set-Cookie"].startswith("mq_console_test=")
    assert "Secure" not in plain.headers["Set-Cookie"]


# -- F4: an anonymous console answers loopback names only; its warning ---------------------


def test_an_anonymous_console_refuses_a_foreign_host(sqlite_db, tmp_path, anonymous):
    port = urllib.parse.urlsplit(anonymous.base).port
    for host in ("attacker.example", f"rebind.test:{port}", f"127.0.0.1.nip.io:{port}"):
        status, _, body = raw(anonymous, "GET", "/api/stats", Host=host)
        assert status == 400 and "Host" in body, host
        status, _, body = raw(anonymous, "POST", "/api/queues/mail/pause", Host=host)
        assert status == 400
    assert stats(sqlite_db)["mail"]["paused"] is False
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert raw(anonymous, "GET", "/api/stats", Host=host)[0] == 200, host
    refused = [e for e in audit(tmp_path) if e["action"] == "host-refused"]
    assert len(refused) == 6 and refused[0]["who"] == "anonymous"
    assert "attacker.example" in refused[0]["detail"] and "127.0.0.1" in refused[0]["detail"]


def test_mq_web_with_no_user_warns_that_every_local_user_acts(sqlite_db, tmp_path):
    (tmp_path / "mq.yaml").write_text("queues: {mail: {handler: 'tests.handlers:ok'}}\n")
    err = Server(sqlite_db).stop()
    assert "WARNING" in err and "every local user of this host" in err and "operator" in err
    err = Server(sqlite_db, "--read-only").stop()
    assert "every local user of this host" in err and "viewer" in err
    write_config(tmp_path)
    assert "WARNING" not in Server(sqlite_db).stop()


# -- F6: capped sizes ------------------------------------------------------------------


def test_the_api_list_limit_is_capped(db, tmp_path, console):
    assert db.run("enqueue", "-q", "thumbs", "1", "2").exit_code == 0
    operator = console.client(VIEWER)
    assert len(operator.get("/api/messages?queue=thumbs&limit=1000").json()) == 2
    for query in ("limit=1001", "limit=1000000000", "limit=1001&error=x"):
        refused = operator.get(f"/api/messages?queue=thumbs&{query}")
        assert refused.status == 400 and "1000" in refused.json()["error"], query


# -- F7: failed logins ------------------------------------------------------------------


def test_failed_logins_back_off_per_address_and_are_recorded(sqlite_db, tmp_path, lone):
    console = lone
    wrong = {"Authorization": basic(("olga", "guess")), "Host": "127.0.0.1"}
    statuses = [raw(console, "GET", "/api/stats", **wrong)[0] for _ in range(5)]
    assert statuses == [401] * 5
    status, headers, body = raw(console, "GET", "/api/stats", **wrong)
    assert status == 429 and int(headers["Retry-After"]) > 0 and "try again" in body
    right = {"Authorization": basic(OPERATOR), "Host": "127.0.0.1"}
    assert raw(console, "GET", "/api/stats", **right)[0] == 429  # that address waits
    assert raw(console, "GET", "/api/stats", source="127.0.0.2", **right)[0] == 200
    unknown = {"Authorization": basic(("nobody", "x")), "Host": "127.0.0.1"}
    assert raw(console, "GET", "/api/stats", source="127.0.0.3", **unknown)[0] == 401
    long = {"Authorization": basic(("n" * 5000, "x")), "Host": "127.0.0.1"}
    assert raw(console, "GET", "/api/stats", source="127.0.0.4", **long)[0] == 401
    failed = [e for e in audit(tmp_path) if e["action"] == "login-failed"]
    assert [e["who"] for e in failed] == ["olga"] * 5 + ["nobody", "n" * 100]  # cut
    assert "127.0.0.1" in failed[0]["detail"] and "/api/stats" in failed[0]["detail"]
    assert "127.0.0.3" in failed[-2]["detail"] and "guess" not in json.dumps(failed)


# -- F9: every bad input is a 400 ------------------------------------------------------


BAD = [
    "/queues/mail?after=%C2%B2",
    "/queues/mail?after=" + "1" + "0" * 30,
    "/queues/mail?after=9223372036854775808",
    "/queues/mail?after=-1",
    "/messages/" + "9" * 30,
    "/messages/9223372036854775808",
    "/api/messages?queue=mail&limit=%C2%B2",
    "/api/messages?queue=mail&limit=0",
    "/api/messages?queue=mail&after=9223372036854775808",
    "/api/messages?queue=mail&after=%D9%A3",
    "/api/messages/" + "9" * 30,
    "/api/messages?queue=mail&state=bogus",
    "/api/messages?queue=no%20such",
    "/api/stats?queue=%00",
]


def test_bad_input_is_a_400_with_json_on_the_api(db, tmp_path, console):
    operator = console.client()
    for path in BAD:
        answer = operator.get(path)
        assert answer.status == 400, (path, answer.status, answer.body[:300])
        if path.startswith("/api/"):
            assert answer.headers["Content-Type"] == "application/json", path
            assert answer.json()["error"], path
        else:
            assert "<h1>400</h1>" in answer.body, path
    assert operator.get("/messages/9223372036854775807").status == 404
    assert operator.get("/api/messages/9223372036854775807").status == 404
    missing = operator.get("/api/no-such-endpoint")
    assert missing.status == 404 and missing.json()["error"]


def test_an_unexpected_error_is_json_on_the_api_and_a_page_elsewhere(sqlite_db, tmp_path):
    from mq_cli.web.app import create_app

    app = create_app(str(write_config(tmp_path, f"database: {sqlite_db.url}\n")))

    @app.get("/api/boom")
    def boom():  # a bug nobody found yet
        raise RuntimeError("boom")

    @app.get("/boom")
    def boom_page():
        raise RuntimeError("boom")

    client = app.test_client()
    auth = {"Authorization": basic(OPERATOR)}
    api = client.get("/api/boom", headers=auth)
    assert api.status_code == 500 and api.get_json()["error"].startswith("internal error")
    page = client.get("/boom", headers=auth)
    assert page.status_code == 500 and b"<h1>500</h1>" in page.data and b"boom" not in page.data


# -- F11: no database URL on a page -----------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:hunter2secret@127.0.0.1:5432/mq_missing_zz",
        "mysql://mq_nobody_zz:hunter2secret@127.0.0.1:3306/mq_missing_zz",
    ],
)
def test_a_database_error_shows_no_url(sqlite_db, tmp_path, url):
    write_config(tmp_path)
    server = Server(dataclasses.replace(sqlite_db, url=url))
    try:
        for path in ("/", "/api/stats"):
            answer = server.client(VIEWER).get(path)
            assert answer.status == 503, answer.body
            for secret in ("127.0.0.1", "mq_missing_zz", "hunter2secret", "mq_nobody_zz", "5432"):
                assert secret not in answer.body, (path, secret)
            assert "database" in answer.body and "log" in answer.body
    finally:
        err = server.stop()
    assert "hunter2secret" not in err and "mq_missing_zz" in err  # the detail: the log's


# -- F14: controls and bidi shown visibly ----------------------------------------------


def test_bidi_and_control_characters_are_shown_visibly(db, tmp_path, console):
    assert db.run("enqueue", "-q", "mail", "1").exit_code == 0
    ident = json.loads(db.run("list", "-q", "mail", "--json").output)[0]["id"]
    nul = "\x01" if db.kind == "postgres" else "\x00"  # PostgreSQL text holds no NUL
    text = f"</pre><script>alert(15)</script>\u202e RTL {nul}\u2066x\ufeff end"
    db.sql("UPDATE mq_messages SET last_error = %s, status = 'failed' WHERE id = %s", (text, ident))
    operator = console.client()
    for path in (f"/messages/{ident}", "/queues/mail?state=failed"):
        body = operator.get(path).body
        assert "\\u202e RTL" in body, path
        # the list's error line is the CLI's (\x00), the message page's this module's
        assert f"\\u{ord(nul):04x}" in body or f"\\x{ord(nul):02x}" in body, path
        assert "\\u2066x\\ufeff end" in body, path
        for char in ("\u202e", nul, "\u2066", "\ufeff"):
            assert char not in body, (path, char)
        assert "<script>alert(15)" not in body
    # the API gives the data as it is
    assert operator.get(f"/api/messages/{ident}").json()["last_error"] == text


# -- mq check: a secret others can read -----------------------------------------------


def test_mq_check_warns_about_a_readable_secret(sqlite_db, tmp_path):
    path = write_config(tmp_path, "  secret_key: 'abcdefghijklmnopqrstu'\n")
    path.chmod(0o644)
    warned = sqlite_db.run("check", env={"MQ_CONFIG": str(path)})
    line = next(x for x in warned.output.splitlines() if "web secrets" in x)
    assert "warn" in line and "chmod 600" in line and "secret_key_file" in line
    path.chmod(0o600)
    result = sqlite_db.run("check", env={"MQ_CONFIG": str(path)})
    assert result.exit_code == warned.exit_code  # a warning, as the other checks' warn
    assert not any("web secrets" in x and "warn" in x for x in result.output.splitlines())
    # hashes alone, readable by the group: a warning too
    path = write_config(tmp_path)
    path.chmod(0o640)
    result = sqlite_db.run("check", env={"MQ_CONFIG": str(path)})
    assert any("web secrets" in x and "password hashes" in x for x in result.output.splitlines())
