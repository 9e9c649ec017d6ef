"""The console's per-drain controls (mq_cli/web/drains.py) on SQLite, MariaDB and PostgreSQL:
real drains stopped from the run log page (through its confirmation) and quieted through
``POST /api/drains/<name>/stop``; viewers see no button and get 403."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.test_stop import (
    HANG,
    SAYS_STOP,
    _ended,
    _live,
    _ran,
    _release_once,
    _run,
    _spawn,
)
from tests.webconsole import OPERATOR, VIEWER, Server, basic, wait_for, write_config


@pytest.fixture
def console(db, tmp_path):
    write_config(tmp_path)
    server = Server(db)
    yield server
    server.stop()


def _api(console, name: str, body: bytes, user=OPERATOR, token: str | None = None):
    client = console.client(user)
    token = token or client.get("/api/csrf").json()["csrf_token"]
    req = urllib.request.Request(f"{console.base}/api/drains/{name}/stop", data=body, method="POST")
    req.add_header("Authorization", basic(user))
    req.add_header("Content-Type", "application/json")
    req.add_header("X-CSRFToken", token)
    try:
        with client.opener.open(req, timeout=HANG) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _slow_drain(db, tmp_path):
    """A drain of thumbs that holds three claimed messages and runs the first (until the
    test releases it)."""
    ids = _enqueue_thumbs(db, tmp_path)
    proc = _spawn(
        db, tmp_path, "-q", "thumbs", "--handler", "tests.handlers:step", "--batch-size", "3",
        "--json",
    )  # fmt: skip
    drain = wait_for(lambda: _live(db, proc.pid, running=True), "the drain running a message")
    return proc, f"{drain['host']}:{drain['pid']}", ids


def _enqueue_thumbs(db, tmp_path) -> list[int]:
    # The first runs until the drain has read the stop (_release_once): the stop must
    # come while it runs (then it finishes and the two others go back to ready).
    hold = {"until": str(tmp_path / "release")}
    steps = [json.dumps({"n": n, "file": str(tmp_path / "ran.jsonl"), "sleep": 1,
                         **(hold if n == 1 else {})}) for n in (1, 2, 3)]  # fmt: skip
    result = db.run("enqueue", "-q", "thumbs", *steps)
    assert result.exit_code == 0, result.output
    return [int(line) for line in result.stdout.split()]


def test_stop_from_the_run_log_page_after_its_confirmation(db, tmp_path, console):
    proc, name, ids = _slow_drain(db, tmp_path)
    action = f'action="/drains/{name}/stop"'
    viewer = console.client(VIEWER)
    assert action not in viewer.get("/runs").body and "Stop…" not in viewer.get("/").body
    refused = viewer.post(
        f"/drains/{name}/stop", {"csrf_token": viewer.token(), "kind": "stop", "confirm": "1"}
    )
    assert refused.status == 403
    assert _api(console, name, b'{"quiet": false}', user=VIEWER)[0] == 403

    operator = console.client()
    page = operator.get("/runs")
    assert action in page.body and "Quiet…" in page.body and "Stop…" in page.body
    assert action in operator.get("/").body  # the overview's live drains too
    token = operator.token("/runs")
    form = {"csrf_token": token, "kind": "stop", "back": "runs"}
    confirm = operator.post(f"/drains/{name}/stop", form)
    assert confirm.status == 200 and f"Stop drain {name}?" in confirm.body
    assert 'name="confirm" value="1"' in confirm.body
    assert _live(db, proc.pid)["stop_request"] is None  # nothing asked yet

    done = operator.post(f"/drains/{name}/stop", {**form, "confirm": "1"})
    assert done.status == 200 and f"asked drain {name} (queue thumbs) to stop" in done.body
    _release_once(tmp_path, SAYS_STOP)
    report = _ended(proc)
    assert (report["succeeded"], report["returned"], report["ended"]) == (1, 2, "stop")
    assert _ran(tmp_path) == [1]
    assert sorted(json.loads(db.run("list", "-q", "thumbs", "--json").output)[i]["id"]
                  for i in (0, 1)) == ids[1:]  # fmt: skip
    run = _run(db, proc.pid)
    assert run["ended"] == "stop" and run["stop_request"]["by"] == "olga (console)"
    [entry] = [e for e in operator.get("/api/actions").json() if e["action"] == "stop-drain"]
    assert (entry["who"], entry["queue"], entry["count"]) == ("olga", "thumbs", 1)
    assert name in entry["detail"]
    # The drain ended: asking again is refused, and says so.
    again = operator.post(f"/drains/{name}/stop", {**form, "confirm": "1"})
    assert again.status == 400 and "nothing to stop" in again.body


def test_quiet_through_the_json_api(db, tmp_path, console):
    proc = db.spawn("drain", "-q", "mail", "--wait", "--max-seconds", "300", "--json")
    drain = wait_for(lambda: _live(db, proc.pid), "the waiting drain in mq status")
    name = f"{drain['host']}:{drain['pid']}"
    for body, complaint in (
        (b'{"quiet": true, "force": 1}', "unknown key(s) 'force'"),
        (b'{"quiet": "yes"}', "quiet is true or false"),
        (b"[1]", "JSON object"),
    ):
        status, answer = _api(console, name, body)
        assert status == 400 and complaint in answer["error"]
    status, answer = _api(console, "nowhere:1", b'{"quiet": true}')
    assert status == 400 and "no live drain is named 'nowhere:1'" in answer["error"]
    status, answer = _api(console, name, b'{"quiet": true}', token="not-a-token")
    assert status == 403 and "error" in answer
    assert _live(db, proc.pid)["stop_request"] is None  # none of those asked anything

    status, answer = _api(console, name, b'{"quiet": true}')
    assert status == 200, answer
    assert (answer["drain"], answer["request"], answer["by"]) == (name, "quiet", "olga (console)")
    report = _ended(proc)
    assert (report["claimed"], report["ended"]) == (0, "quiet")
    assert _run(db, proc.pid)["stop_request"]["by"] == "olga (console)"
    whats = [e["action"] for e in console.client().get("/api/actions").json()]
    assert whats[0] == "quiet-drain" and whats.count("quiet-drain") == 2  # one refused
