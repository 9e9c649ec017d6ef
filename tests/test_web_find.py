"""Finding messages in `mq web` on SQLite, MariaDB and PostgreSQL: the queue page's
preview, "next retry at" and "failed at" columns, failures grouped by error (whose
links' filter selects exactly the group) and the search across queues."""

from __future__ import annotations

import html
import json
import re
import urllib.parse

import pytest

from mq_cli.api import MQ
from mq_cli.core.config import load_config
from mq_cli.ops import columns, failures, search
from tests.webconsole import EVIL, OPERATOR, VIEWER, Server, fail_messages, write_config


@pytest.fixture
def console(db, tmp_path):
    path = write_config(tmp_path)  # and a queue of raw bytes
    path.write_text(path.read_text().replace("queues:\n", "queues:\n  raw: {format: bytes}\n"))
    server = Server(db)
    yield server
    err = server.stop()
    for secret in (OPERATOR[1], VIEWER[1], db.url):
        assert secret not in err
    assert "Traceback" not in err


def two_kinds(db, tmp_path, odd: str = "disk full") -> None:
    """mail: 3 ValueErrors (tests.handlers:raises), then 2 RuntimeErrors (``odd``)."""
    fail_messages(db, 3)
    payloads = [json.dumps({"file": str(tmp_path / "steps"), "n": n, "fail": odd}) for n in (1, 2)]
    assert db.run("enqueue", "-q", "mail", "--silent", *payloads).exit_code == 0
    ran = db.run("drain", "-q", "mail", "--handler", "tests.handlers:step")
    assert ran.exit_code == 0, ran.output
    assert json.loads(db.run("stats", "--json").output)["mail"]["failed"] == 5


def failed_cli(db, queue: str = "mail") -> list[dict]:
    found = db.run("list", "-q", queue, "--status", "failed", "--json")
    assert found.exit_code == 0, found.output
    return json.loads(found.output)


def selected_by(listed: list[dict], text: str) -> list[int]:
    """What Filter.error selects: the messages whose last_error holds ``text`` (any case)."""
    return [m["id"] for m in listed if text.lower() in (m["last_error"] or "").lower()]


def confirm_links(body: str) -> list[tuple[str, str, str]]:
    """(action, state, error) of each link to a queue's confirmation page."""
    found = []
    for href in re.findall(r'href="([^"]*/confirm\?[^"]*)"', body):
        query = urllib.parse.parse_qs(html.unescape(href).split("?", 1)[1])
        found.append((query["action"][0], query["state"][0], query["error"][0]))
    return found


def page_is_safe(answer) -> None:
    assert answer.status == 200, answer.body
    assert "<script>alert" not in answer.body
    assert re.search(r"<script>|<script [^>]*>[^<]", answer.body) is None
    assert " style=" not in answer.body
    assert "unsafe-inline" not in answer.headers["Content-Security-Policy"]


# -- the queue page's columns --------------------------------------------------------


def test_the_list_shows_a_preview_next_retry_and_failed_at(db, tmp_path, console):
    fail_messages(db, 2)
    long_text = "héllo " + "x" * 200 + " END"
    for args in (["-q", "raw", long_text], ["-q", "raw", "--delay", "1h", "later"]):
        assert db.run("enqueue", "--silent", *args).exit_code == 0
    assert db.run("enqueue", "-q", "raw", "--silent", input=b"\x00\xff\xfebin").exit_code == 0
    operator = console.client()

    failed = failed_cli(db)
    page = operator.get("/queues/mail?state=failed")
    page_is_safe(page)
    for m in failed:
        row = _row(page.body, m["id"])
        # a failed row's available_at is when it failed (ack_failure and gc set it to now)
        assert f'data-failed-at="{m["available_at"]}"' in row
        assert m["created_at"] <= m["available_at"]
    first = _row(page.body, failed[0]["id"])
    assert "&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;" in first  # the JSON payload, as text

    listed = json.loads(db.run("list", "-q", "raw", "--json").output)
    page = operator.get("/queues/raw")
    page_is_safe(page)
    text, later, binary = listed
    row = _row(page.body, text["id"])
    shown = re.search(r'<td class="preview"[^>]*>([^<]*)</td>', row).group(1)
    assert shown.startswith("héllo xxx") and shown.endswith("…") and "END" not in shown
    assert len(shown) == 81  # 80 characters and the ellipsis
    assert later["state"] == "delayed"
    assert f'data-next-retry="{later["available_at"]}"' in _row(page.body, later["id"])
    assert 'data-next-retry="' not in _row(page.body, text["id"])
    assert "binary, 6 bytes" in _row(page.body, binary["id"])


def _row(body: str, ident: int) -> str:
    found = re.search(rf'<tr data-id="{ident}".*?</tr>', body, re.DOTALL)
    assert found is not None, ident
    return found.group(0)


def test_a_preview_reads_a_bounded_head_of_a_big_payload(db, tmp_path):
    write_config(tmp_path)
    big = "{" + '"k": "' + "v" * 3_000_000 + '"}'
    assert db.run("enqueue", "-q", "thumbs", "--silent", input=big).exit_code == 0
    ident = json.loads(db.run("list", "-q", "thumbs", "--json").output)[0]["id"]
    with MQ(load_config(None, db.url)) as mq:
        heads = mq._reader.payload_heads([ident, 999_999_999], columns.HEAD_BYTES)
    head, size = heads[ident]
    assert size == len(big) and len(head) == columns.HEAD_BYTES and big.startswith(head.decode())
    assert 999_999_999 not in heads
    kind, text = columns.preview(head, size)
    assert kind == "text" and text == big[:80] + "…"


# -- failures grouped by error ---------------------------------------------------------


def test_failures_are_grouped_by_error_and_each_group_filter_selects_it(db, tmp_path, console):
    two_kinds(db, tmp_path)
    operator = console.client()
    answer = operator.get("/api/failures?queue=mail")
    assert answer.status == 200, answer.body
    found = answer.json()
    assert (found["queue"], found["failed"], found["looked_at"], found["complete"]) == (
        "mail", 5, 5, True,
    )  # fmt: skip
    groups = {g["error"]: g for g in found["groups"]}
    assert sorted(groups) == ["RuntimeError", "ValueError"]
    assert [g["count"] for g in found["groups"]] == [3, 2]  # the biggest first
    listed = failed_cli(db)
    for key, group in groups.items():
        ids = selected_by(listed, key)
        assert group["count"] == len(ids) and group["exact"] is True
        assert group["sample_id"] in ids
        times = sorted(m["available_at"] for m in listed if m["id"] in ids)
        assert (group["oldest"], group["newest"]) == (times[0], times[-1])
        # the queue page's filter (the confirmation's) selects exactly the group
        query = urllib.parse.urlencode({"queue": "mail", "state": "failed", "error": key})
        page = operator.get(f"/api/messages?{query}").json()
        assert sorted(m["id"] for m in page["messages"]) == sorted(ids)

    page = operator.get("/queues/mail/failures")
    page_is_safe(page)
    assert sorted(confirm_links(page.body)) == sorted(
        (action, "failed", key) for key in groups for action in ("retry", "delete")
    )
    assert confirm_links(console.client(VIEWER).get("/queues/mail/failures").body) == []
    assert 'href="/queues/mail/failures"' in operator.get("/queues/mail").body
    assert 'href="/queues/mail/failures"' in operator.get("/").body


def test_a_multi_line_exception_is_grouped_by_its_class(db, tmp_path, console):
    """A message's further lines (a DETAIL) follow the exception's line: not its key."""
    two_kinds(db, tmp_path, odd="disk full\nDETAIL:  no space left on /var")
    assert failed_cli(db)[-1]["last_error"].endswith("DETAIL:  no space left on /var")
    groups = console.client().get("/api/failures?queue=mail").json()["groups"]
    assert [(g["error"], g["count"], g["exact"]) for g in groups] == [
        ("ValueError", 3, True), ("RuntimeError", 2, True),
    ]  # fmt: skip


def test_a_group_whose_text_also_matches_others_gets_no_group_action(db, tmp_path, console):
    two_kinds(db, tmp_path, odd="no ValueError here")
    operator = console.client()
    groups = {g["error"]: g for g in operator.get("/api/failures?queue=mail").json()["groups"]}
    listed = failed_cli(db)
    assert groups["ValueError"]["count"] == 3
    assert groups["ValueError"]["matching"] == len(selected_by(listed, "ValueError")) == 5
    assert groups["ValueError"]["exact"] is False
    assert groups["RuntimeError"]["exact"] is True and groups["RuntimeError"]["count"] == 2
    page = operator.get("/queues/mail/failures").body
    assert {error for _, _, error in confirm_links(page)} == {"RuntimeError"}
    assert "also in 2 other failed message(s)" in page


def test_a_group_text_is_shown_escaped_and_linked_encoded(db, tmp_path, console):
    fail_messages(db, 2)
    ident = failed_cli(db)[0]["id"]
    odd = EVIL + "\u202e: rest"
    db.sql("UPDATE mq_messages SET last_error = %s WHERE id = %s", (odd, ident))
    operator = console.client()
    groups = operator.get("/api/failures?queue=mail").json()["groups"]
    assert sorted((g["error"], g["count"], g["exact"]) for g in groups) == [
        (EVIL + "\u202e", 1, True), ("ValueError", 1, True),
    ]  # fmt: skip
    page = operator.get("/queues/mail/failures")
    page_is_safe(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in page.body  # the bidi mark shown
    assert "\u202e" not in page.body
    assert ("retry", "failed", EVIL + "\u202e") in confirm_links(page.body)


def test_failures_refuse_bad_queues_and_say_when_there_is_none(db, tmp_path, console):
    operator = console.client()
    for path in ["/api/failures", "/api/failures?queue=", "/api/failures?queue=a%20b",
                 "/api/failures?queue=nosuch", "/queues/nosuch/failures"]:  # fmt: skip
        answer = operator.get(path)
        assert answer.status == 400, (path, answer.body)
        if path.startswith("/api/"):
            assert "error" in answer.json()
    empty = operator.get("/queues/thumbs/failures")
    page_is_safe(empty)
    assert "no failed message" in empty.body
    assert operator.get("/api/failures?queue=thumbs").json()["groups"] == []
    assert console.client(VIEWER).get("/queues/thumbs/failures").status == 200


def test_groups_are_made_in_sql_over_a_bounded_sample(db, tmp_path):
    write_config(tmp_path)
    two_kinds(db, tmp_path)
    with MQ(load_config(None, db.url)) as mq:
        report = failures.groups(mq._reader, "mail", sample=4)
    assert report.looked_at == 4 and report.complete is False and report.failed is None
    assert sum(g.count for g in report.groups) == 4


# -- search across queues --------------------------------------------------------------


def test_search_by_id_unique_key_and_error_text(db, tmp_path, console):
    two_kinds(db, tmp_path)
    for queue in ("mail", "thumbs"):
        assert db.run("enqueue", "-q", queue, "--unique-key", "order-42", "1").exit_code == 0
    operator = console.client()
    listed = failed_cli(db)
    ident = listed[0]["id"]

    by_id = operator.get(f"/api/search?q={ident}").json()
    # the id first; the digits may be in other messages' errors too (tracebacks' lines)
    assert (by_id["results"][0]["id"], by_id["results"][0]["match"]) == (ident, "id")
    assert [r["id"] for r in by_id["results"]].count(ident) == 1
    assert by_id["results"][0]["state"] == "failed"

    by_key = operator.get("/api/search?q=order-42").json()
    keyed = [(r["queue"], r["match"]) for r in by_key["results"] if r["match"] == "unique_key"]
    assert sorted(keyed) == [("mail", "unique_key"), ("thumbs", "unique_key")]

    by_error = operator.get("/api/search?q=DISK%20FULL").json()
    assert sorted(r["id"] for r in by_error["results"]) == sorted(selected_by(listed, "disk full"))
    assert {r["match"] for r in by_error["results"]} == {"error"}
    assert by_error["stopped_early"] is False and by_error["next_after"] is None

    page = operator.get("/search?q=disk+full")
    page_is_safe(page)
    for r in by_error["results"]:
        assert f'href="/messages/{r["id"]}"' in page.body
    assert 'name="q"' in operator.get("/").body  # the search box in the nav


def test_search_stops_at_its_budget_and_says_where_to_go_on(db, tmp_path):
    write_config(tmp_path)
    fail_messages(db, 6)
    with MQ(load_config(None, db.url)) as mq:
        first = search.search(mq.config, mq._reader, "bad payload", budget=4)
        assert len(first.results) == 4 and first.stopped_early and first.next_after is not None
        rest = search.search(mq.config, mq._reader, "bad payload", after=first.next_after, budget=4)
    assert len(rest.results) == 2 and not rest.stopped_early and rest.next_after is None
    ids = [r.message.id for r in first.results + rest.results]
    assert ids == sorted(m["id"] for m in failed_cli(db))


@pytest.mark.parametrize(
    "query, status",
    [("", 200), ("%C2%B2", 200), ("1" + "0" * 30, 200), ("9223372036854775808", 200),
     ("-1", 200), ("0", 200), ("%00", 400), ("x" * 2000, 400), ("%FF%FE", 200),
     ("%F0%9F%98%80", 200), ("a&after=%C2%B2", 400), ("a&after=1" + "0" * 30, 400)],
)  # fmt: skip
def test_any_search_input_is_answered_never_a_500(db, tmp_path, console, query, status):
    fail_messages(db, 1)
    operator = console.client()
    api = operator.get(f"/api/search?q={query}")
    assert api.status == status, api.body
    if status == 200:
        assert isinstance(api.json()["results"], list)
    else:
        assert "error" in api.json()
    page = operator.get(f"/search?q={query}")
    assert page.status == status, page.body
    if status == 200:
        page_is_safe(page)


def test_a_key_whose_case_only_python_folds_gets_no_group_action():
    """The database's lower() may fold ASCII only; the filter folds as Python does."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    for key, exact in [
        ("ValueError", True),
        ("Échec", False),
        ("失败 → retry", True),
        (" ", False),
    ]:
        assert failures.Group(key, 2, now, now, 1, 2).exact is exact, key
    assert failures.Group("ValueError", 2, now, now, 1, 3).exact is False
