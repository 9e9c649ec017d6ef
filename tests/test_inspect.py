"""Operators' look-and-fix commands: `mq list`, `mq show`, `mq retry`, `mq delete`, `mq purge`."""

from __future__ import annotations

import base64
import json
import re

import pytest

from mq_cli.backends import open_backend
from mq_cli.backends.mysql.dialect import MysqlBackend
from mq_cli.backends.postgres.dialect import PostgresBackend
from mq_cli.backends.sqlite.dialect import SqliteBackend
from mq_cli.core.dburl import parse_database_url


def backend_for(db):
    return open_backend(parse_database_url(db.url), "mq_messages")


def enqueue(db, queue: str, *payloads: bytes, **kw) -> list[int]:
    with backend_for(db) as b:
        return b.enqueue(queue, list(payloads), **kw)


def claim(db, queue: str, count: int, owner: str = "host:1:aa") -> list[int]:
    with backend_for(db) as b:
        return [m.id for m in b.claim(queue, count, owner)]


def fail(db, queue: str, count: int, error: str = "Traceback ...\nValueError: boom") -> list[int]:
    with backend_for(db) as b:
        claimed = b.claim(queue, count, "me")
        for m in claimed:
            assert b.ack_failure(m, "me", error, 0, True)
        return [m.id for m in claimed]


def tombstone(db, queue: str, key: str = "k1") -> int:
    """What a succeeded message with a unique key leaves behind (unique_retention)."""
    with backend_for(db) as b:  # staged apart, so no other ready message is claimed
        (ident,) = b.enqueue("staging", [b'"once"'], unique_key=key)
        (m,) = b.claim("staging", 1, "me")
        assert b.ack_success(m, "me", retention=3600)
    db.sql("UPDATE mq_messages SET queue = %s WHERE id = %s", (queue, ident))
    return ident


def rows(db) -> list[tuple]:
    return db.sql("SELECT id, status, error_count, owner FROM mq_messages ORDER BY id")


def listed_ids(output: str) -> list[int]:
    return [int(line.split()[0]) for line in output.splitlines() if re.match(r"^\d+\s", line)]


# -- list -----------------------------------------------------------------------


def test_list_shows_live_messages_oldest_first(db):
    (failed,) = enqueue(db, "jobs", b'"f"')
    fail(db, "jobs", 1)
    (processing,) = enqueue(db, "jobs", b'"p"')
    claim(db, "jobs", 1)
    ready = enqueue(db, "jobs", b'"r1"', b'"r2"')
    (delayed,) = enqueue(db, "jobs", b'"later"', delay=3600)
    enqueue(db, "other", b'"elsewhere"')
    tombstone(db, "jobs")
    result = db.run("list", "-q", "jobs")
    assert result.exit_code == 0, result.output
    assert listed_ids(result.stdout) == [failed, processing, *ready, delayed]
    lines = {int(line.split()[0]): line for line in result.stdout.splitlines()[1:]}
    assert "failed" in lines[failed] and "ValueError: boom" in lines[failed]
    assert "processing" in lines[processing]
    assert re.search(r"\b(59m\d\ds|1h00m)\b", lines[delayed])  # available in about an hour
    header = result.stdout.splitlines()[0]
    for column in ("ID", "STATUS", "PRI", "ERRORS", "AGE", "AVAILABLE IN", "LAST ERROR"):
        assert column in header


def test_list_filters_by_status_and_limits(db):
    enqueue(db, "jobs", *[f'"{i}"'.encode() for i in range(5)])
    failed = fail(db, "jobs", 2)
    result = db.run("list", "-q", "jobs", "--status", "failed")
    assert listed_ids(result.stdout) == failed
    result = db.run("list", "-q", "jobs", "--status", "ready", "--limit", "2")
    assert result.exit_code == 0
    assert listed_ids(result.stdout) == [failed[-1] + 1, failed[-1] + 2]
    assert "--limit" in result.stderr  # says there are more
    result = db.run("list", "-q", "jobs", "--limit", "5")
    assert listed_ids(result.stdout) == list(range(failed[0], failed[0] + 5))
    assert result.stderr == ""


def test_list_json_shape(db):
    (ident,) = enqueue(db, "jobs", b'{"a": 1}', priority=3)
    result = db.run("list", "-q", "jobs", "--json")
    assert result.exit_code == 0
    (entry,) = json.loads(result.stdout)
    assert {"id", "queue", "status", "error_count", "created_at"} <= set(entry)
    assert (entry["id"], entry["queue"], entry["status"], entry["priority"]) == (
        ident, "jobs", "ready", 3,
    )  # fmt: skip
    assert entry["created_at"].endswith("Z") and "payload" not in entry
    unknown = db.run("list", "-q", "empty", "--json")
    assert unknown.exit_code == 2 and unknown.stdout == ""
    assert "queue 'empty' is unknown" in unknown.stderr


def test_list_of_an_empty_queue(db):
    config = db.tmp / "mq.yaml"
    config.write_text("queues:\n  jobs: {handler: tests.handlers:ok}\n")
    result = db.run("-c", str(config), "list", "-q", "jobs")
    assert result.exit_code == 0
    assert result.stdout.strip() == "no messages in queue jobs"
    assert json.loads(db.run("-c", str(config), "list", "-q", "jobs", "--json").stdout) == []


@pytest.mark.parametrize(
    "args",
    [["list", "-q", "jbos"], ["stats", "-q", "jbos"], ["status", "-q", "jbos"],
     ["gc", "--stalled", "-q", "jbos"], ["gc", "--errors", "-q", "jbos"],
     ["purge", "-q", "jbos", "--yes"]],
)  # fmt: skip
def test_an_unknown_queue_is_the_same_usage_error_everywhere(db, args):
    enqueue(db, "jobs", b'"a"')
    result = db.run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("mq: queue 'jbos' is unknown: not configured, no messages")
    assert line.endswith("jobs")  # the queues there are


@pytest.mark.parametrize(
    "args", [["-q", "jobs", "--status", "done"], ["-q", "jobs", "--limit", "0"]]
)
def test_list_usage_errors(db, args):
    assert db.run("list", *args).exit_code == 2


def test_list_takes_every_state_stats_counts_and_every_queue_without_q(db):
    (failed,) = enqueue(db, "jobs", b'"f"')
    fail(db, "jobs", 1)
    (live,) = enqueue(db, "jobs", b'"p"')
    claim(db, "jobs", 1, owner="livehost:1:aa")
    (stalled,) = enqueue(db, "jobs", b'"s"')
    claim(db, "jobs", 1, owner="deadhost:2:bb")
    db.sql(f"UPDATE mq_messages SET heartbeat_at = {db.now_sql(-7200)} WHERE id = %s", (stalled,))  # noqa: S608
    (ready,) = enqueue(db, "jobs", b'"r"')
    (delayed,) = enqueue(db, "jobs", b'"later"', delay=3600)
    (elsewhere,) = enqueue(db, "other", b'"o"')
    expected = {
        "ready": [ready], "delayed": [delayed], "processing": [live],
        "stalled": [stalled], "failed": [failed],
    }  # fmt: skip
    for state, ids in expected.items():
        result = db.run("list", "-q", "jobs", "--status", state, "--json")
        assert result.exit_code == 0, result.output
        listed = json.loads(result.stdout)
        assert [m["id"] for m in listed] == ids, state
        assert {m["state"] for m in listed} == {state}
    counts = json.loads(db.run("stats", "-q", "jobs", "--json").stdout)["jobs"]
    assert {k: counts[k] for k in expected} == {k: len(v) for k, v in expected.items()}
    table = db.run("list", "-q", "jobs", "--status", "stalled")
    assert listed_ids(table.stdout) == [stalled]  # with -q the first column is the id
    assert "stalled" in table.stdout
    everything = db.run("list")
    assert everything.exit_code == 0, everything.output
    assert everything.stdout.splitlines()[0].split()[:2] == ["QUEUE", "ID"]
    ids = [int(line.split()[1]) for line in everything.stdout.splitlines()[1:]]
    assert ids == [failed, live, stalled, ready, delayed, elsewhere]
    assert db.run("list", "--status", "delayed", "--json").stdout.count('"id"') == 1
    assert db.run("list", "--status", "failed").stdout.startswith("QUEUE")
    none = db.run("list", "--status", "stalled", "-q", "other")
    assert none.stdout.strip() == "no stalled messages in queue other"


# -- show -----------------------------------------------------------------------


def test_show_json_payload_pretty_and_every_field(db):
    (ident,) = enqueue(db, "jobs", b'{"b": [1, 2], "a": "x"}', priority=2)
    fail(db, "jobs", 1, error="Traceback (most recent call last):\nValueError: boom")
    result = db.run("show", str(ident))
    assert result.exit_code == 0, result.output
    text = result.stdout
    for field in ("id", "queue", "status", "priority", "error_count", "created_at", "owner"):
        assert re.search(rf"^{field}:", text, re.MULTILINE), field
    assert re.search(r"^status:\s+failed$", text, re.MULTILINE)
    assert '\n  "b": [\n' in text  # pretty-printed
    assert "ValueError: boom" in text and "Traceback" in text


def test_show_text_and_binary_payloads(db):
    text_id, binary_id = enqueue(db, "raw", "héllo\nwörld".encode(), bytes(range(256)))
    result = db.run("show", str(text_id))
    assert "héllo\nwörld" in result.stdout
    result = db.run("show", str(binary_id))
    assert result.exit_code == 0
    assert "256 bytes" in result.stdout
    assert re.search(r"^00000000  00 01 02 03 04 05 06 07  08 09 0a", result.stdout, re.MULTILINE)


def test_show_cuts_a_huge_text_payload_and_says_how_to_get_all(db):
    big = ("é" + "x" * 99) * 80_000  # 8 MB of text, a JSON string
    (ident,) = enqueue(db, "raw", json.dumps(big, ensure_ascii=False).encode())
    result = db.run("show", str(ident))
    assert result.exit_code == 0, result.output[:300]
    assert len(result.stdout) < 100_000
    size = len(json.dumps(big, ensure_ascii=False).encode())
    shown = 64 * 1024
    left = size - len(json.dumps(big, ensure_ascii=False)[:shown].encode())
    assert f"payload ({size} bytes, text, the first {shown} characters):" in result.stdout
    assert result.stdout.rstrip().endswith(
        f"... {left} more bytes left out (--json shows all of it)"
    )
    assert json.loads(json.loads(db.run("show", str(ident), "--json").stdout)["payload"]) == big


def test_show_json_per_contract(db):
    text_id, binary_id = enqueue(db, "raw", b'{"a": 1}', b"\xff\xfe\x00binary")
    result = db.run("show", str(text_id), "--json")
    entry = json.loads(result.stdout)
    assert entry["payload"] == '{"a": 1}' and "payload_encoding" not in entry
    assert entry["last_error"] is None and entry["id"] == text_id
    assert {"id", "queue", "status", "error_count", "created_at"} <= set(entry)
    entry = json.loads(db.run("show", str(binary_id), "--json").stdout)
    assert entry["payload_encoding"] == "base64"
    assert base64.b64decode(entry["payload"]) == b"\xff\xfe\x00binary"


def test_show_unknown_id_is_exit_1(db):
    gone = tombstone(db, "jobs")
    for ident in ("12345", str(gone)):
        result = db.run("show", ident)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert f"no message {ident}" in result.stderr
    assert db.run("show", "abc").exit_code == 2


# -- retry and delete -------------------------------------------------------------


def test_retry_requeues_now_with_a_fresh_error_count(db):
    failed = enqueue(db, "jobs", b'"a"', b'"b"')
    fail(db, "jobs", 2)
    db.sql("UPDATE mq_messages SET error_count = 7")
    (delayed,) = enqueue(db, "jobs", b'"later"', delay=3600)
    result = db.run("retry", *map(str, failed), str(delayed))
    assert result.exit_code == 0, result.output
    assert "requeued 3 message(s)" in result.stdout
    assert [r[1:] for r in rows(db)] == [("ready", 0, None)] * 3
    with backend_for(db) as b:  # all available now, in their old order
        assert [m.id for m in b.claim("jobs", 10, "x")] == [*failed, delayed]


def test_retry_refuses_a_processing_message_but_does_the_others(db):
    (held,) = enqueue(db, "jobs", b'"held"')
    claim(db, "jobs", 1, owner="busy:7:ff")
    (failed,) = enqueue(db, "jobs", b'"failed"')
    fail(db, "jobs", 1)
    result = db.run("retry", str(held), str(failed), "999999")
    assert result.exit_code == 1
    assert "requeued 1 message(s)" in result.stdout
    assert f"message {held} is processing" in result.stderr and "--force" in result.stderr
    assert "message 999999 not found" in result.stderr
    assert rows(db) == [(held, "processing", 0, "busy:7:ff"), (failed, "ready", 0, None)]


def test_retry_force_takes_a_processing_message_back(db):
    (held,) = enqueue(db, "jobs", b'"held"')
    with backend_for(db) as b:
        (mine,) = b.claim("jobs", 1, "busy:7:ff")
        result = db.run("retry", "--force", str(held))
        assert result.exit_code == 0, result.output
        assert rows(db) == [(held, "ready", 0, None)]
        # the drain that held it can no longer record a result for it
        assert b.ack_success(mine, "busy:7:ff") is False


def test_delete_refuses_a_processing_message_unless_forced(db):
    held, ready = enqueue(db, "jobs", b'"held"', b'"ready"')
    claim(db, "jobs", 1)
    result = db.run("delete", str(held), str(ready))
    assert result.exit_code == 1
    assert "deleted 1 message(s)" in result.stdout
    assert f"message {held} is processing" in result.stderr
    assert [r[0] for r in rows(db)] == [held]
    result = db.run("delete", "--force", str(held))
    assert result.exit_code == 0, result.output
    assert rows(db) == []


def test_delete_of_missing_and_done_messages(db):
    gone = tombstone(db, "jobs", "key")
    result = db.run("delete", "424242", str(gone))
    assert result.exit_code == 1
    assert "deleted 0 message(s)" in result.stdout
    assert "message 424242 not found" in result.stderr
    assert f"message {gone} not found" in result.stderr
    # the tombstone is not a message: still there, still keeping its key
    assert db.sql("SELECT status FROM mq_messages") == [("done",)]


def test_an_id_past_bigint_is_no_message(db):
    """No table holds it, so nothing is sent (SQLite's driver could not bind it, and
    PostgreSQL would compare it as numeric: issue 31)."""
    huge = str(1 << 64)
    show = db.run("show", huge)
    assert show.exit_code == 1 and f"no message {huge}" in show.stderr, show.output
    for command in ("retry", "delete"):
        result = db.run(command, huge)
        assert result.exit_code == 1 and f"message {huge} not found" in result.stderr


def test_retry_and_delete_need_ids(db):
    assert db.run("retry").exit_code == 2
    assert db.run("delete", "x").exit_code == 2


def test_many_ids_at_once(db):
    ids = enqueue(db, "jobs", *[b'"x"'] * 2500)
    result = db.run("delete", *map(str, ids))
    assert result.exit_code == 0, result.output
    assert "deleted 2500 message(s)" in result.stdout
    assert rows(db) == []


# -- purge ----------------------------------------------------------------------


def test_purge_needs_yes_when_not_at_a_terminal(db):
    enqueue(db, "jobs", b'"a"', b'"b"')
    result = db.run("purge", "-q", "jobs")
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    assert len(rows(db)) == 2


def test_purge_deletes_the_whole_queue_with_its_tombstones(db):
    enqueue(db, "jobs", b'"a"', b'"b"')
    claim(db, "jobs", 1)
    enqueue(db, "jobs", b'"c"')
    fail(db, "jobs", 1)
    tombstone(db, "jobs")
    (other,) = enqueue(db, "other", b'"keep"')
    result = db.run("purge", "-q", "jobs", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert "deleted 3 message(s) from queue jobs" in result.stdout
    assert [r[0] for r in rows(db)] == [other]


def test_purge_keeps_what_a_drain_may_be_running_unless_forced(db):
    enqueue(db, "jobs", b'"a"', b'"b"', b'"c"')
    (held,) = claim(db, "jobs", 1)
    result = db.run("purge", "-q", "jobs", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 message(s) from queue jobs" in result.stdout
    assert "kept 1 processing message(s)" in result.stdout and "--force" in result.stdout
    assert [(r[0], r[1]) for r in rows(db)] == [(held, "processing")]
    refused = db.run("purge", "-q", "jobs", "--status", "processing", "--yes")
    assert refused.exit_code == 2
    assert "--force" in refused.stderr and "gc --stalled --delete" in refused.stderr
    assert len(rows(db)) == 1
    forced = db.run("purge", "-q", "jobs", "--status", "processing", "--yes", "--force")
    assert forced.exit_code == 0, forced.output
    assert rows(db) == []


def test_purge_of_an_unknown_empty_queue_says_so(db):
    enqueue(db, "jobs", b'"a"')
    result = db.run("purge", "-q", "jbos", "--yes")
    assert result.exit_code == 2, result.output
    assert "queue 'jbos' is unknown: not configured, no messages" in result.stderr
    assert "jobs" in result.stderr
    assert len(rows(db)) == 1


def test_purge_one_status(db):
    enqueue(db, "jobs", b'"a"', b'"b"', b'"c"')
    failed = fail(db, "jobs", 2)
    result = db.run("purge", "-q", "jobs", "--status", "failed", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 failed message(s) from queue jobs" in result.stdout
    assert [r[1] for r in rows(db)] == ["ready"]
    assert not set(failed) & {r[0] for r in rows(db)}


def test_purge_deletes_in_bounded_batches(db, monkeypatch):
    enqueue(db, "bulk", *[b'"x"'] * 2500)
    batches: list[int] = []
    for cls in (SqliteBackend, MysqlBackend, PostgresBackend):
        original = cls.purge

        def spy(self, *args, _original=original, **kw):
            count = _original(self, *args, **kw)
            batches.append(count)
            return count

        monkeypatch.setattr(cls, "purge", spy)
    result = db.run("purge", "-q", "bulk", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2500 message(s)" in result.stdout
    assert sum(batches) == 2500 and max(batches) <= 1000
    assert rows(db) == []


def test_purge_asks_at_a_terminal(db, monkeypatch):
    enqueue(db, "jobs", b'"a"')
    monkeypatch.setattr("mq_cli.cli.operate._stdin_is_terminal", lambda: True)
    result = db.run("purge", "-q", "jobs", input="n\n")
    assert result.exit_code == 1
    assert "1 message(s)" in result.output
    assert len(rows(db)) == 1
    result = db.run("purge", "-q", "jobs", input="y\n")
    assert result.exit_code == 0, result.output
    assert rows(db) == []


# -- stored text never drives the terminal ----------------------------------------------------

HOSTILE = (
    "cr\rnul\x00del\x7f clear\x1b[2J retitle\x1b]0;pwned\x07 clip\x1b]52;c;aGVsbG8=\x07 "
    "csi\x9b31m bidi\u202eevil\u202c iso\u2066x\u2069 marks\u200e\u200f\u061c"
)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_controls_and_bidi_in_stored_text_are_escaped_in_every_view(db):
    # A unique key cannot hold NUL (mq refuses it: PostgreSQL's text cannot); the rest can.
    key = HOSTILE.replace("\x00", "")
    (ident,) = enqueue(
        db, "jobs", json.dumps({"t": HOSTILE}, ensure_ascii=False).encode(), unique_key=key
    )
    (text_id,) = enqueue(db, "raw", "csi\x9b31m bidi\u202eevil\u202c".encode())
    (json_id,) = enqueue(db, "raw", '{"t": "csi\x9b31m bidi\u202eevil"}'.encode())
    fail(db, "jobs", 1, error=f"Traceback ...\nValueError: {HOSTILE}")
    # owner is ASCII in MariaDB: the C0 controls only
    db.sql("UPDATE mq_messages SET owner = %s WHERE id = %s", ("h\x1b]0;pwned\x07:1:a", ident))
    views = {
        "list": db.run("list", "-q", "jobs"),
        "gc": db.run("gc", "--errors"),
        "show": db.run("show", str(ident)),
        "show text": db.run("show", str(text_id)),
        "show json": db.run("show", str(json_id)),
    }
    for name, result in views.items():
        assert result.exit_code == 0, (name, result.output)
        assert not RAW.search(result.output), (name, result.output)
    for name in ("list", "gc"):  # the last line of last_error, cut to the column
        assert "nul\\x00del\\x7f clear\\x1b[2J retitle\\x1b]0;" in views[name].stdout
    assert "\\x9b31m" in views["show text"].stdout
    assert '"t": "csi\\u009b31m bidi\\u202eevil"' in views["show json"].stdout  # still JSON
    show = views["show"].stdout
    assert "bidi\\u202eevil" in show  # the payload's JSON view: JSON's own escape
    assert re.search(r"^unique_key:\s+cr\\x0dnuldel\\x7f clear\\x1b\[2J", show, re.M)
    assert "  nul\\x00del\\x7f clear\\x1b[2J" in show  # a line of last_error
    assert "\\x1b]52;c;" in show and "bidi\\u202eevil\\u202c" in show
    assert re.search(r"^owner:\s+h\\x1b\]0;pwned\\x07:1:a$", show, re.M)
    # JSON output: escaped, still valid, and decodes to the very same strings
    for args in (["list", "-q", "jobs"], ["gc", "--errors"], ["show", str(ident)]):
        result = db.run(*args, "--json")
        assert result.exit_code == 0, result.output
        assert not RAW.search(result.stdout) and "\\u009b" in result.stdout
        decoded = json.loads(result.stdout)
        entry = decoded if isinstance(decoded, dict) else decoded[0]
        assert entry["unique_key"] == key
        # PostgreSQL's text holds no NUL: mq stores it as the escape it shows.
        stored = HOSTILE.replace("\x00", "\\x00") if db.kind == "postgres" else HOSTILE
        assert entry["last_error"].endswith(stored)


def test_a_failing_handlers_error_is_escaped_in_the_drains_log(db, tmp_path):
    (tmp_path / "hostile.py").write_text(f"def fail(payload):\n    raise ValueError({HOSTILE!r})\n")
    enqueue(db, "jobs", b"{}")
    result = db.run("drain", "-q", "jobs", "--handler", "hostile:fail")
    assert result.exit_code == 0, result.output
    assert "nul\\x00del\\x7f clear\\x1b[2J retitle\\x1b]0;" in result.stderr
    assert not RAW.search(result.stderr), result.stderr
