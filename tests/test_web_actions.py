"""The console's destructive actions over HTTP on SQLite, MariaDB and PostgreSQL (issue 49):
each goes through a confirmation that counts what it will touch (F2), acts on the filter
typed and nothing enqueued after, refuses a misspelt API filter (F3), acts on ids of the
URL's queue only (F8), purges ready without delayed (F5), and leaves one audit line."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_gc import make_stalled
from tests.webconsole import (
    OPERATOR,
    VIEWER,
    Server,
    basic,
    confirmation,
    count_shown,
    fail_messages,
    said,
    write_config,
)


@pytest.fixture
def console(db, tmp_path):
    write_config(tmp_path)
    server = Server(db)
    yield server
    server.stop()


def stats(db) -> dict:
    return json.loads(db.run("stats", "--json").output)


def counts(db) -> dict:
    """The counts of `mq stats --json`, without the age that moves with the clock."""
    return {
        queue: {k: v for k, v in row.items() if k != "oldest_ready_seconds"}
        for queue, row in stats(db).items()
    }


def ids_of(db, queue: str, state: str | None = None) -> list[int]:
    args = ["list", "-q", queue, "--json", "--limit", "10000"]
    found = db.run(*args, *(["--status", state] if state else []))
    return [m["id"] for m in json.loads(found.output)]


def audit(client) -> list[dict]:
    return client.get("/api/actions").json()


def test_all_matching_acts_on_the_typed_filter_and_not_on_later_messages(db, console):
    """F2: the buttons submit the filter on screen to the confirmation, which counts it;
    the POST acts on what existed when it was shown."""
    fail_messages(db, 4)
    assert db.run("enqueue", "-q", "mail", "--silent", "7", "8").exit_code == 0
    operator = console.client()
    page = operator.get("/queues/mail").body
    filter_form = re.search(r'<form class="filter".*?</form>', page, re.DOTALL).group(0)
    assert 'formaction="/queues/mail/confirm"' in filter_form  # the typed fields go along
    assert 'value="matching"' not in page  # no "all matching" POST of a remembered filter

    # a typed text that matches nothing: nothing is touched
    fields, action, body = confirmation(
        operator, "/queues/mail/confirm?action=delete&state=failed&error=no-such-error-text"
    )
    assert count_shown(body) == ("exact", 0) and "no-such-error-text" in body
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert done.status == 200 and "deleted 0 message(s)" in said(done)
    assert (stats(db)["mail"]["failed"], stats(db)["mail"]["ready"]) == (4, 2)

    # state failed: counted from the stats; the two ready ones fail after it was shown
    fields, action, body = confirmation(operator, "/queues/mail/confirm?action=delete&state=failed")
    assert count_shown(body) == ("exact", 4) and "state failed" in body
    before = ids_of(db, "mail", "ready")
    assert db.run("enqueue", "-q", "mail", "--silent", "9").exit_code == 0
    later = [i for i in ids_of(db, "mail", "ready") if i not in before]
    assert db.run("drain", "-q", "mail").exit_code == 0  # all three ready ones fail now
    assert len(ids_of(db, "mail", "failed")) == 7
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert "deleted 6 message(s)" in said(done)  # the 4 shown and the 2 that failed since
    assert ids_of(db, "mail", "failed") == later  # enqueued after the page: untouched
    line = audit(operator)[0]
    assert (line["who"], line["action"], line["queue"], line["count"]) == (
        "olga", "delete", "mail", 6,
    )  # fmt: skip
    assert line["filter"] == {"state": "failed", "error": None, "key": None}
    assert line["upto"] == max(before)


def test_a_text_filter_is_counted_and_an_empty_filter_needs_the_queue_name(db, console):
    fail_messages(db, 3)
    operator = console.client()
    fields, action, body = confirmation(operator, "/queues/mail/confirm?action=retry&error=raises")
    assert count_shown(body) == ("exact", 3)
    assert "type <strong>mail</strong>" not in body  # a filter: no typed name needed
    assert "requeued 3 message(s)" in said(
        operator.post(action, {**fields, "csrf_token": operator.token()})
    )

    fields, action, body = confirmation(operator, "/queues/mail/confirm?action=delete")
    assert count_shown(body) == ("exact", 3) and "type <strong>mail</strong>" in body
    token = operator.token()
    refused = operator.post(action, {**fields, "csrf_token": token, "confirm": "mai"})
    assert refused.status == 400 and "type the queue" in refused.body
    assert stats(db)["mail"]["ready"] == 3
    # the old one-click POST (no confirmation, so no upto): refused
    direct = {"csrf_token": token, "scope": "matching", "action": "delete", "confirm": "mail"}
    assert operator.post("/queues/mail/messages", direct).status == 400
    assert stats(db)["mail"]["ready"] == 3
    done = operator.post(action, {**fields, "csrf_token": token, "confirm": "mail"})
    assert "deleted 3 message(s)" in said(done)
    assert stats(db).get("mail", {}).get("ready", 0) == 0
    assert [e["count"] for e in audit(operator)] == [3, 3]  # one line per action


def test_ids_of_another_queue_are_not_touched_nor_recorded_under_it(db, console):
    """F8: ids are acted on only within the URL's queue."""
    fail_messages(db, 2)
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1").exit_code == 0
    (mine,) = ids_of(db, "thumbs")
    theirs = ids_of(db, "mail")
    operator = console.client()
    query = "&".join(f"ids={i}" for i in [mine, *theirs])
    fields, action, body = confirmation(operator, f"/queues/thumbs/confirm?action=delete&{query}")
    assert count_shown(body) == ("exact", 1) and "not in queue thumbs" in body
    assert fields["ids"] == [str(mine)]  # the form holds only the queue's own
    # the repro of F8: a POST naming ids of another queue
    crafted = {**fields, "ids": [str(i) for i in [mine, *theirs]]}
    done = operator.post(action, {**crafted, "csrf_token": operator.token()})
    assert "deleted 1 message(s)" in said(done) and "2 not in queue thumbs" in said(done)
    assert ids_of(db, "mail") == theirs and ids_of(db, "thumbs") == []
    line = audit(operator)[0]
    assert line["queue"] == "thumbs" and line["ids"] == [mine] and line["count"] == 1
    assert line["detail"].startswith(f"ids {mine}; not done: not_in_queue 2")


def test_a_single_message_is_confirmed_on_its_own(db, console):
    fail_messages(db, 2)
    first, second = ids_of(db, "mail")
    operator = console.client()
    page = operator.get(f"/messages/{first}").body
    assert 'action="/queues/mail/confirm"' in page and 'method="get"' in page
    fields, action, body = confirmation(
        operator, f"/queues/mail/confirm?action=retry&ids={first}&back=message"
    )
    assert count_shown(body) == ("exact", 1)
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert "requeued 1 message(s)" in said(done) and f"Message {first}" in done.body
    assert ids_of(db, "mail", "ready") == [first] and ids_of(db, "mail", "failed") == [second]


def test_purge_ready_leaves_delayed_and_the_confirmation_counts_it(db, console):
    """F5 through the console: ready is the ready of `mq stats`, delayed its own choice."""
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1", "2", "3").exit_code == 0
    assert db.run("enqueue", "-q", "thumbs", "--silent", "--delay", "1h", "4", "5").exit_code == 0
    operator = console.client()
    queue_page = operator.get("/queues/thumbs").body
    assert "<option>delayed</option>" in queue_page and "<option>stalled</option>" in queue_page
    fields, action, body = confirmation(
        operator, "/queues/thumbs/confirm?action=purge&status=ready"
    )
    assert count_shown(body) == ("exact", 3)
    assert (
        operator.post(action, {**fields, "csrf_token": operator.token()}).status == 400
    )  # untyped
    done = operator.post(action, {**fields, "csrf_token": operator.token(), "confirm": "thumbs"})
    assert "deleted 3 ready message(s)" in said(done)
    assert (stats(db)["thumbs"]["ready"], stats(db)["thumbs"]["delayed"]) == (0, 2)
    line = audit(operator)[0]
    assert (line["action"], line["count"], line["filter"]["state"]) == ("purge", 3, "ready")


def test_requeue_stalled_says_how_many_went_to_ready_and_how_many_failed(db, console):
    """max_errors is 1 in the test config: a requeued stalled message fails at once."""
    make_stalled(db, "mail", 2)
    operator = console.client()
    fields, action, body = confirmation(operator, "/queues/mail/confirm?action=requeue-stalled")
    assert count_shown(body) == ("exact", 2)
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert "0 back to ready; 2 reached max_errors and are now failed" in said(done)
    assert stats(db)["mail"]["failed"] == 2
    line = audit(operator)[0]
    assert (line["action"], line["count"]) == ("requeue-stalled", 2)
    assert line["outcome"] == {"ready": 0, "failed": 2}

    fields, action, body = confirmation(operator, "/queues/mail/confirm?action=requeue-failed")
    assert count_shown(body) == ("exact", 2)
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert "2 back to ready" in said(done) and stats(db)["mail"]["ready"] == 2
    assert audit(operator)[0]["outcome"] == {"ready": 2, "failed": 0}


def test_a_viewer_sees_no_confirmation(db, console):
    viewer = console.client(VIEWER)
    assert viewer.get("/queues/mail/confirm?action=delete&state=failed").status == 403


@pytest.mark.parametrize(
    "path", [
        "/queues/mail/confirm?action=drop",
        "/queues/mail/confirm?action=delete&state=gone",
        "/queues/mail/confirm?action=delete&ids=%C2%B2",
        "/queues/mail/confirm?action=purge&status=done",
        "/queues/no-such-queue/confirm?action=delete",
    ],
)  # fmt: skip
def test_a_bad_confirmation_request_is_a_400(db, console, path):
    answer = console.client().get(path)
    assert answer.status == 400 and "Traceback" not in answer.body


# -- the JSON API (F3) -------------------------------------------------------------------


def api(console, action: str, body: object, token: str | None = None) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    client = console.client()
    token = token or client.get("/api/csrf").json()["csrf_token"]
    req = urllib.request.Request(
        f"{console.base}/api/messages/{action}", data=json.dumps(body).encode(), method="POST"
    )
    req.add_header("Authorization", basic(OPERATOR))
    req.add_header("Content-Type", "application/json")
    req.add_header("X-CSRFToken", token)
    try:
        with client.opener.open(req, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    "body, says",
    [
        ({"queue": "mail", "status": "failed"}, "status"),
        ({"queue": "mail", "unique_key": "k"}, "unique_key"),
        ({"queue": "mail", "error": 5}, "error"),
        ({"queue": "mail", "state": "gone"}, "state"),
        ({"queue": "mail", "force": "yes", "state": "failed"}, "force"),
        ({"queue": "mail"}, '"all": true'),
        ({"queue": "mail", "all": 1}, "all"),
        ({"queue": "mail", "all": True, "state": "failed"}, "all"),
        ({"ids": [1, "2"]}, "ids"),
        ({"ids": [1], "state": "failed"}, "ids"),
        ({"queue": 5, "all": True}, "queue"),
        ([1, 2], "JSON object"),
    ],
)  # fmt: skip
def test_the_api_refuses_what_it_cannot_read_exactly(db, console, body, says):
    fail_messages(db, 2)
    assert db.run("enqueue", "-q", "mail", "--silent", "7").exit_code == 0
    before = counts(db)
    status, answer = api(console, "delete", body)
    assert status == 400 and says in answer["error"], answer
    assert counts(db) == before


def test_the_api_acts_on_an_explicit_all_and_records_its_filter(db, console):
    fail_messages(db, 2)
    assert db.run("enqueue", "-q", "mail", "--silent", "7").exit_code == 0
    status, answer = api(console, "retry", {"queue": "mail", "state": "failed", "error": "raises"})
    assert (status, answer["done"]) == (200, 2)
    line = audit(console.client())[0]
    assert line["filter"] == {"state": "failed", "error": "raises", "key": None}
    assert line["queue"] == "mail" and line["count"] == 2
    status, answer = api(console, "delete", {"queue": "mail", "all": True})
    assert (status, answer["done"]) == (200, 3)
    assert sum(n for k, n in counts(db)["mail"].items() if k != "paused") == 0
    assert audit(console.client())[0]["filter"] == {"state": None, "error": None, "key": None}


def test_api_ids_with_a_queue_act_within_it_only(db, console):
    fail_messages(db, 2)
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1").exit_code == 0
    (mine,) = ids_of(db, "thumbs")
    theirs = ids_of(db, "mail")
    status, answer = api(console, "delete", {"queue": "thumbs", "ids": [mine, *theirs]})
    assert status == 200 and answer["done"] == 1
    assert answer["not_in_queue"] == theirs
    assert ids_of(db, "mail") == theirs
    line = audit(console.client())[0]
    assert (line["queue"], line["ids"], line["count"]) == ("thumbs", [mine], 1)


def test_a_run_past_one_chunk_is_one_audit_line(db, console):
    """2,500 messages: three transactions of at most 1,000, one request, one line."""
    payloads = [str(i) for i in range(2500)]
    assert db.run("enqueue", "-q", "thumbs", "--silent", *payloads).exit_code == 0
    operator = console.client()
    fields, action, body = confirmation(
        operator, "/queues/thumbs/confirm?action=delete&state=ready"
    )
    assert count_shown(body) == ("exact", 2500)
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert said(done) == "deleted 2500 message(s)"
    assert stats(db)["thumbs"]["ready"] == 0
    assert [(e["action"], e["count"]) for e in audit(operator)] == [("delete", 2500)]


def test_api_ids_without_a_queue_are_recorded_under_theirs(db, console):
    fail_messages(db, 1)
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1").exit_code == 0
    (mail,), (thumbs,) = ids_of(db, "mail"), ids_of(db, "thumbs")
    status, answer = api(console, "delete", {"ids": [mail]})
    assert (status, answer["done"]) == (200, 1)
    assert audit(console.client())[0]["queue"] == "mail"  # where the id was
    assert db.run("enqueue", "-q", "mail", "--silent", "2").exit_code == 0
    (again,) = ids_of(db, "mail")
    status, answer = api(console, "delete", {"ids": [again, thumbs]})
    assert (status, answer["done"]) == (200, 2)
    line = audit(console.client())[0]
    assert line["queue"] is None and sorted(line["ids"]) == sorted([again, thumbs])


def test_a_text_filter_counted_past_its_time_says_at_least(db, monkeypatch):
    """The confirmation's count of a text filter stops after COUNT_SECONDS (here 0:
    after one step) and is then a lower bound; a state alone is exact at once, and so is
    a unique key (looked up on its index: one step reads every message holding it)."""
    from mq_cli.api import MQ
    from mq_cli.core.config import load_config
    from mq_cli.ops.browse import Filter
    from mq_cli.web import bulk

    payloads = [str(i) for i in range(6000)]
    assert db.run("enqueue", "-q", "thumbs", "--silent", *payloads).exit_code == 0
    monkeypatch.setattr(bulk, "COUNT_SECONDS", 0.0)
    with MQ(load_config(None, db.url)) as mq:
        upto = mq.last_id("thumbs")
        assert bulk.count(mq, "thumbs", Filter("ready", "no such error"), upto)[1] == "at least"
        assert bulk.count(mq, "thumbs", Filter("ready", None, "no-such-key"), upto) == (0, "exact")
        assert bulk.count(mq, "thumbs", Filter("ready"), upto) == (6000, "exact")
        monkeypatch.setattr(bulk, "COUNT_SECONDS", 60.0)
        assert bulk.count(mq, "thumbs", Filter("ready", "no such error"), upto) == (0, "exact")


def test_above_ten_thousand_the_confirmation_estimates_and_the_action_is_exact(db, console):
    """At 1M rows an exact count took seconds: above 10,000 the confirmation shows the
    console's estimate, marked "about ~N", and the action still deletes exactly what the
    filter matches up to the id it was shown with."""
    payloads = [str(i) for i in range(10_050)]
    for start in range(0, len(payloads), 2500):
        chunk = payloads[start : start + 2500]
        assert db.run("enqueue", "-q", "bulk", "--silent", *chunk).exit_code == 0
    operator = console.client()
    fields, action, body = confirmation(operator, "/queues/bulk/confirm?action=delete&state=ready")
    known, shown = count_shown(body)
    assert known == "about" and shown > 10_000
    assert f"about ~{shown:,}" in body and "an estimate" in body
    assert db.run("enqueue", "-q", "bulk", "--silent", "10050").exit_code == 0
    done = operator.post(action, {**fields, "csrf_token": operator.token()})
    assert "deleted 10050 message(s)" in said(done)
    assert len(ids_of(db, "bulk", "ready")) == 1  # the one enqueued after the page
    line = audit(operator)[0]
    assert (line["action"], line["queue"], line["count"]) == ("delete", "bulk", 10_050)

    # a purge's confirmation too: about, then exactly what the purge deletes
    fields, action, body = confirmation(operator, "/queues/bulk/confirm?action=purge&status=ready")
    assert count_shown(body) == ("exact", 1)
