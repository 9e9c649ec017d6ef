"""`mq gc`: finding stalled and failed messages, requeuing, deleting, alerting, notifying."""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from mq_cli.backends import open_backend
from mq_cli.backends.liveness import GRACE
from mq_cli.backends.mysql.dialect import MysqlBackend
from mq_cli.backends.postgres.dialect import PostgresBackend
from mq_cli.backends.sqlite.dialect import SqliteBackend
from mq_cli.core.dburl import parse_database_url

DEAD = "deadhost:4242:abcd"


def backend_for(db):
    return open_backend(parse_database_url(db.url), "mq_messages")


def config(tmp_path: Path, text: str) -> None:
    (tmp_path / "mq.yaml").write_text(text)


def age_heartbeat(db, ids: list[int], seconds: int) -> None:
    """Move the heartbeat of ``ids`` ``seconds`` into the past (as if their drain died)."""
    statement = f"UPDATE mq_messages SET heartbeat_at = {db.now_sql(-seconds)} WHERE id = %s"  # noqa: S608
    for ident in ids:
        db.sql(statement, (ident,))


def _claimed(db, queue: str, payloads: list[bytes], owner: str) -> list[int]:
    """Claim new messages for ``queue`` (staged in a queue of their own, so the
    queue's other ready messages are not taken)."""
    with backend_for(db) as b:
        ids = b.enqueue("staging", payloads)
        assert [m.id for m in b.claim("staging", len(ids), owner)] == ids
    for ident in ids:
        db.sql("UPDATE mq_messages SET queue = %s WHERE id = %s", (queue, ident))
    return ids


def make_stalled(db, queue: str, count: int = 1, age: int = 7200, owner: str = DEAD) -> list[int]:
    """``count`` messages claimed by a drain that stopped heartbeating ``age`` seconds ago."""
    ids = _claimed(db, queue, [f'{{"n": {i}}}'.encode() for i in range(count)], owner)
    age_heartbeat(db, ids, age)
    return ids


def make_processing(db, queue: str, owner: str = "livehost:1:beef") -> int:
    """A message held by a live drain (fresh heartbeat)."""
    (ident,) = _claimed(db, queue, [b'"live"'], owner)
    return ident


def make_failed(db, queue: str, count: int = 1, error: str = "ValueError: boom") -> list[int]:
    ids = _claimed(db, queue, [f'{{"f": {i}}}'.encode() for i in range(count)], "me")
    with backend_for(db) as b:
        for ident in ids:
            m = b.get_message(ident)
            assert m is not None and b.ack_failure(m, "me", error, 0, True)
    return ids


def make_ready(db, queue: str, count: int = 1) -> list[int]:
    with backend_for(db) as b:
        return b.enqueue(queue, [b'"ready"'] * count)


def snapshot(db) -> list[tuple]:
    return db.sql(
        "SELECT id, queue, status, error_count, owner, heartbeat_at, available_at, last_error "
        "FROM mq_messages ORDER BY id"
    )


def row(db, ident: int) -> tuple:
    (found,) = db.sql(
        "SELECT status, error_count, owner, last_error FROM mq_messages WHERE id = %s", (ident,)
    )
    return found


def listed_ids(output: str) -> list[int]:
    return [int(line.split()[0]) for line in output.splitlines() if re.match(r"^\d+\s", line)]


def gc_json(db, *args: str) -> list[dict]:
    result = db.run("gc", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- finding ------------------------------------------------------------------


def test_listing_shows_the_matches_and_changes_nothing(db):
    stalled = make_stalled(db, "jobs", 2)
    make_processing(db, "jobs")
    failed = make_failed(db, "jobs")
    make_ready(db, "jobs")
    before = snapshot(db)

    result = db.run("gc", "--stalled")
    assert result.exit_code == 0, result.output
    assert listed_ids(result.stdout) == stalled
    assert DEAD in result.stdout  # which drain died
    result = db.run("gc", "--errors")
    assert result.exit_code == 0, result.output
    assert listed_ids(result.stdout) == failed
    assert "ValueError: boom" in result.stdout
    assert snapshot(db) == before


def test_nothing_to_list_says_so(db):
    make_ready(db, "jobs")
    result = db.run("gc", "--stalled")
    assert result.exit_code == 0
    assert result.stdout.strip() == "no stalled messages"


def test_stalled_after_per_queue_and_from_defaults(db, tmp_path):
    config(tmp_path, "defaults: {stalled_after: 1h}\nqueues:\n  fast: {stalled_after: 5m}\n")
    fast = make_stalled(db, "fast", age=600)  # 10 minutes: stalled for `fast` (5m)
    young = make_stalled(db, "other", age=600)  # not configured: defaults (1h), not stalled
    old = make_stalled(db, "other", age=7200)  # two hours: stalled everywhere
    found = gc_json(db, "--stalled")
    assert sorted(m["id"] for m in found) == sorted(fast + old)
    # --older-than replaces every queue's stalled_after
    found = gc_json(db, "--stalled", "--older-than", "1m")
    assert sorted(m["id"] for m in found) == sorted(fast + young + old)
    found = gc_json(db, "--stalled", "--older-than", "3h")
    assert found == []


def test_a_live_drains_messages_are_never_stalled(db):
    make_processing(db, "jobs")
    assert gc_json(db, "--stalled") == []
    assert gc_json(db, "--stalled", "--older-than", "1m") == []


def test_json_shape(db):
    (stalled,) = make_stalled(db, "jobs")
    (failed,) = make_failed(db, "jobs", error="Traceback ...\nKeyError: 'x'")
    (entry,) = gc_json(db, "--stalled")
    assert {"id", "queue", "status", "error_count", "created_at"} <= set(entry)
    assert (entry["id"], entry["queue"], entry["status"]) == (stalled, "jobs", "processing")
    assert entry["error_count"] == 0 and entry["owner"] == DEAD
    assert entry["created_at"].endswith("Z")
    assert datetime.fromisoformat(entry["created_at"].replace("Z", "+00:00")).tzinfo is not None
    (entry,) = gc_json(db, "--errors")
    assert (entry["id"], entry["status"], entry["error_count"]) == (failed, "failed", 1)
    assert entry["last_error"] == "Traceback ...\nKeyError: 'x'"
    assert "payload" not in entry


def test_queue_option_narrows(db):
    a = make_failed(db, "a")
    b = make_failed(db, "b", 2)
    make_failed(db, "c")
    assert [m["id"] for m in gc_json(db, "--errors", "-q", "b")] == b
    assert sorted(m["id"] for m in gc_json(db, "--errors", "-q", "a", "-q", "b")) == a + b
    result = db.run("gc", "--errors", "-q", "c", "--delete")
    assert result.exit_code == 0, result.output
    assert db.sql("SELECT queue FROM mq_messages WHERE status = 'failed' ORDER BY id") == [
        ("a",), ("b",), ("b",),
    ]  # fmt: skip


def test_check_exit_codes(db):
    make_ready(db, "jobs")
    make_processing(db, "jobs")
    result = db.run("gc", "--errors", "--check")
    assert (result.exit_code, result.output) == (0, "")  # silent: cron mails nothing
    result = db.run("gc", "--stalled", "--check")
    assert (result.exit_code, result.output) == (0, "")
    failed = make_failed(db, "jobs")
    result = db.run("gc", "--errors", "--check")
    assert result.exit_code == 1
    assert listed_ids(result.stdout) == failed  # the list, so cron mails it
    stalled = make_stalled(db, "jobs")
    result = db.run("gc", "--stalled", "--check", "--json")
    assert result.exit_code == 1
    assert [m["id"] for m in json.loads(result.stdout)] == stalled


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--stalled", "--errors"],
        ["--errors", "--older-than", "1h"],
        ["--stalled", "--requeue", "--delete"],
        ["--stalled", "--older-than", "soon"],
        ["--errors", "-q", "bad name"],
    ],
)
def test_usage_errors_are_exit_2_and_change_nothing(db, args):
    make_failed(db, "jobs")
    before = snapshot(db)
    result = db.run("gc", *args)
    assert result.exit_code == 2, result.output
    assert snapshot(db) == before


# -- requeue and delete ----------------------------------------------------------


def test_requeue_stalled_counts_a_failure_and_fails_at_max_errors(db, tmp_path):
    config(tmp_path, "queues:\n  jobs: {max_errors: 3}\n")
    first, last_chance = make_stalled(db, "jobs", 2)
    db.sql("UPDATE mq_messages SET error_count = 2 WHERE id = %s", (last_chance,))
    live = make_processing(db, "jobs")
    result = db.run("gc", "--stalled", "--requeue")
    assert result.exit_code == 0, result.output
    assert "requeued 2 stalled message(s)" in result.stdout
    assert "1 reached max_errors" in result.stdout
    assert "; ready in 1.5 s" in result.stdout  # liveness.GRACE, not "now"
    status, errors, owner, last_error = row(db, first)
    assert (status, errors, owner) == ("ready", 1, None)
    assert "stalled" in last_error and DEAD in last_error and "requeued" in last_error
    assert row(db, last_chance)[:3] == ("failed", 3, None)
    assert row(db, live)[:2] == ("processing", 0)  # a live drain's message is left alone
    # the requeued message is ready at once: a drain claims it
    with backend_for(db) as b:
        assert [m.id for m in b.claim("jobs", 10, "new")] == [first]


def test_requeue_failed_resets_the_error_count(db):
    failed = make_failed(db, "jobs", 2)
    db.sql("UPDATE mq_messages SET error_count = 10")
    result = db.run("gc", "--errors", "--requeue")
    assert result.exit_code == 0, result.output
    assert "requeued 2 failed message(s)" in result.stdout
    assert [row(db, i)[:2] for i in failed] == [("ready", 0), ("ready", 0)]
    with backend_for(db) as b:
        assert [m.id for m in b.claim("jobs", 10, "new")] == failed


def test_delete_stalled_and_failed(db):
    stalled = make_stalled(db, "jobs", 2)
    failed = make_failed(db, "jobs")
    ready = make_ready(db, "jobs")
    live = make_processing(db, "jobs")
    result = db.run("gc", "--stalled", "--delete")
    assert result.exit_code == 0, result.output
    assert "deleted 2 stalled message(s)" in result.stdout
    remaining = [r[0] for r in snapshot(db)]
    assert not set(stalled) & set(remaining) and len(remaining) == 3
    result = db.run("gc", "--errors", "--delete")
    assert result.exit_code == 0, result.output
    assert "deleted 1 failed message(s)" in result.stdout
    assert [r[0] for r in snapshot(db)] == sorted(ready + [live])
    assert failed[0] in remaining


def test_actions_with_nothing_to_do_are_silent(db):
    make_ready(db, "jobs")
    for args in (["--stalled", "--requeue"], ["--errors", "--delete"]):
        result = db.run("gc", *args)
        assert (result.exit_code, result.output) == (0, "")


def test_action_with_json_prints_what_it_changed(db):
    stalled = make_stalled(db, "jobs", 3)
    result = db.run("gc", "--stalled", "--delete", "--json")
    assert result.exit_code == 0, result.output
    assert sorted(m["id"] for m in json.loads(result.stdout)) == stalled
    assert "deleted 3 stalled message(s)" in result.stderr
    assert snapshot(db) == []


def test_what_changed_meanwhile_is_left_alone_and_not_reported(db, tmp_path):
    """The callback runs between the listing and the action: it finishes one message."""
    config(tmp_path, "defaults: {on_stalled: 'tests.jobs:notify_finish_first'}\n")
    first, second = make_stalled(db, "jobs", 2)
    result = db.run("gc", "--stalled", "--notify", "--requeue", "--json")
    assert result.exit_code == 0, result.output
    assert [m["id"] for m in json.loads(result.stdout)] == [second]
    assert "requeued 1 stalled message(s); 1 changed meanwhile" in result.stderr
    assert db.sql("SELECT id, status FROM mq_messages") == [(second, "ready")]


def test_check_with_an_action_acts_and_exits_1(db):
    make_failed(db, "jobs")
    result = db.run("gc", "--errors", "--delete", "--check")
    assert result.exit_code == 1
    assert "deleted 1 failed message(s)" in result.stdout
    assert snapshot(db) == []
    result = db.run("gc", "--errors", "--delete", "--check")
    assert (result.exit_code, result.output) == (0, "")


def test_stalled_actions_skip_rows_that_changed_after_the_match(db):
    """The UPDATE/DELETE repeats the match: a message re-heartbeated, finished or
    re-claimed between the listing and the action is not touched."""
    refreshed, finished, reclaimed, still = make_stalled(db, "jobs", 4)
    with backend_for(db) as b:
        matched = [m.id for m in b.find_stalled("jobs", 3600, 0, 1000)]
        assert matched == [refreshed, finished, reclaimed, still]
        # meanwhile: the dead drain was only slow and heartbeats again, another
        # message finished, and one was requeued by someone else and claimed again
        assert b.heartbeat([refreshed], DEAD) == 1
        db.sql("DELETE FROM mq_messages WHERE id = %s", (finished,))
        db.sql("UPDATE mq_messages SET status = 'ready', owner = NULL WHERE id = %s", (reclaimed,))
        assert [m.id for m in b.claim("jobs", 1, "other:1:aa")] == [reclaimed]
        note = ("stalled: no heartbeat from ", "; requeued by a test")
        assert b.requeue_stalled("jobs", matched, 3600, 10, note) == ([still], [])
        assert row(db, refreshed)[:3] == ("processing", 0, DEAD)
        assert row(db, reclaimed)[:3] == ("processing", 0, "other:1:aa")
        assert row(db, still)[:3] == ("ready", 1, None)
        age_heartbeat(db, [refreshed], 7200)
        b.heartbeat([reclaimed], "other:1:aa")
        matched = [m.id for m in b.find_stalled("jobs", 3600, 0, 1000)]
        assert matched == [refreshed]
        assert b.heartbeat([refreshed], DEAD) == 1
        assert b.delete_stalled("jobs", matched, 3600) == []
        assert row(db, refreshed)[:2] == ("processing", 0)


def test_failed_actions_skip_rows_that_changed_after_the_match(db):
    retried, kept = make_failed(db, "jobs", 2)
    with backend_for(db) as b:
        matched = [m.id for m in b.find_failed("jobs", 0, 1000)]
        assert matched == [retried, kept]
        # an operator retries one meanwhile, and a drain claims it
        db.sql("UPDATE mq_messages SET status = 'ready', error_count = 0 WHERE id = %s", (retried,))
        b.claim("jobs", 1, "drain:1:aa")
        assert b.delete_failed("jobs", matched) == [kept]
        assert row(db, retried)[:3] == ("processing", 0, "drain:1:aa")
        assert db.sql("SELECT COUNT(*) FROM mq_messages WHERE id = %s", (kept,)) == [(0,)]
        assert b.requeue_failed("jobs", matched) == []
        assert row(db, retried)[:3] == ("processing", 0, "drain:1:aa")


def test_bounded_batches_delete_2500_failed_messages(db, monkeypatch):
    with backend_for(db) as b:
        ids = b.enqueue("bulk", [b'"x"'] * 2500)
    db.sql("UPDATE mq_messages SET status = 'failed', error_count = 10, last_error = 'boom'")
    batches: list[int] = []
    for cls in (SqliteBackend, MysqlBackend, PostgresBackend):
        original = cls.delete_failed

        def spy(self, queue, chosen, _original=original):
            batches.append(len(chosen))
            return _original(self, queue, chosen)

        monkeypatch.setattr(cls, "delete_failed", spy)
    result = db.run("gc", "--errors", "--delete")
    assert result.exit_code == 0, result.output
    assert "deleted 2500 failed message(s)" in result.stdout
    assert sum(batches) == 2500 and max(batches) <= 1000 and len(batches) >= 3
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
    assert len(ids) == 2500


def test_bounded_batches_requeue_2500_failed_messages_from_a_listing(db, tmp_path):
    """With --notify the matches are listed first, then acted on in batches."""
    config(tmp_path, "defaults: {on_failed: 'exec:true'}\n")
    with backend_for(db) as b:
        b.enqueue("bulk", [b'"x"'] * 2500)
    db.sql("UPDATE mq_messages SET status = 'failed', error_count = 10")
    result = db.run("gc", "--errors", "--notify", "--requeue")
    assert result.exit_code == 0, result.output
    assert "requeued 2500 failed message(s)" in result.stdout
    assert db.sql("SELECT status, error_count, COUNT(*) FROM mq_messages GROUP BY 1, 2") == [
        ("ready", 0, 2500)
    ]


# -- notify ---------------------------------------------------------------------


@pytest.fixture
def notified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "notified.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))

    def read() -> list[dict]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return read


def test_notify_calls_the_python_callback_once_per_queue(db, tmp_path, notified):
    config(tmp_path, "defaults: {on_failed: 'tests.jobs:notify_record'}\n")
    a = make_failed(db, "a", 2, error="ValueError: a")
    b = make_failed(db, "b", 1, error="ValueError: b")
    make_ready(db, "c")
    result = db.run("gc", "--errors", "--notify")
    assert result.exit_code == 0, result.output
    calls = {call["queue"]: call for call in notified()}
    assert sorted(calls) == ["a", "b"]  # once per queue with matches
    assert [m["id"] for m in calls["a"]["payload"]] == a
    assert [m["id"] for m in calls["b"]["payload"]] == b
    (first,) = calls["b"]["payload"]
    assert {"id", "queue", "status", "error_count", "last_error", "created_at"} <= set(first)
    assert (first["queue"], first["status"]) == ("b", "failed")
    assert first["last_error"] == "ValueError: b"
    assert first["created_at"].endswith("Z")
    assert db.sql("SELECT COUNT(*) FROM mq_messages WHERE status = 'failed'") == [(3,)]


def test_notify_runs_before_the_action(db, tmp_path, notified):
    config(tmp_path, "queues:\n  jobs: {on_stalled: 'tests.jobs:notify_record', max_errors: 5}\n")
    stalled = make_stalled(db, "jobs", 2)
    result = db.run("gc", "--stalled", "--notify", "--requeue")
    assert result.exit_code == 0, result.output
    (call,) = notified()
    assert [m["id"] for m in call["payload"]] == stalled
    assert call["counts"]["stalled"] == 2 and call["counts"]["ready"] == 0, call  # not requeued yet
    assert [row(db, i)[:2] for i in stalled] == [("ready", 1), ("ready", 1)]


def test_notify_with_an_exec_callback_gets_json_on_stdin(db, tmp_path):
    out = tmp_path / "alert.json"
    config(tmp_path, f"queues:\n  jobs: {{on_stalled: \"exec:sh -c 'cat > {out}'\"}}\n")
    stalled = make_stalled(db, "jobs", 3)
    result = db.run("gc", "--stalled", "--notify")
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    assert [m["id"] for m in got] == stalled
    assert all(m["status"] == "processing" and m["owner"] == DEAD for m in got)


def test_a_failing_callback_is_exit_1_and_its_queue_is_left_alone(db, tmp_path, notified):
    config(
        tmp_path,
        "queues:\n  bad: {on_failed: 'tests.jobs:notify_fail'}\n"
        "  good: {on_failed: 'tests.jobs:notify_record'}\n",
    )
    bad = make_failed(db, "bad")
    make_failed(db, "good")
    result = db.run("gc", "--errors", "--notify", "--delete")
    assert result.exit_code == 1
    assert "bad" in result.stderr and "the pager is down" in result.stderr
    assert "Traceback" not in result.stderr.splitlines()[0]
    # the failed notification keeps its queue's messages for the next run; the other went on
    assert [r[0] for r in snapshot(db)] == bad
    assert [call["queue"] for call in notified()] == ["good"]


def test_a_failing_exec_callback_is_exit_1(db, tmp_path):
    config(tmp_path, "defaults: {on_failed: \"exec:sh -c 'echo no route >&2; exit 4'\"}\n")
    make_failed(db, "jobs")
    result = db.run("gc", "--errors", "--notify")
    assert result.exit_code == 1
    assert "no route" in result.stderr


def test_notify_needs_a_callback(db, tmp_path):
    make_failed(db, "jobs")
    result = db.run("gc", "--errors", "--notify", "-q", "jobs", "--delete")
    assert result.exit_code == 2
    assert "on_failed" in result.stderr
    assert len(snapshot(db)) == 1


def test_a_callback_that_cannot_be_imported_is_exit_2_before_anything(db, tmp_path):
    config(tmp_path, "defaults: {on_failed: 'tests.jobs:nonexistent'}\n")
    make_failed(db, "jobs")
    result = db.run("gc", "--errors", "--notify", "--delete")
    assert result.exit_code == 2
    assert "nonexistent" in result.stderr
    assert len(snapshot(db)) == 1


def test_callbacks_are_validated_in_the_config(tmp_path, db):
    config(tmp_path, "queues:\n  jobs: {on_stalled: ''}\n")
    result = db.run("gc", "--stalled")
    assert result.exit_code == 2
    assert "on_stalled" in result.stderr and "line 2" in result.stderr


# -- drain's requeue_stalled -----------------------------------------------------


def test_drain_with_requeue_stalled_recovers_stalled_messages(db, tmp_path, notified):
    config(
        tmp_path,
        "queues:\n  jobs: {handler: 'tests.jobs:record', requeue_stalled: true}\n"
        "  plain: {handler: 'tests.jobs:record'}\n",
    )
    make_stalled(db, "jobs", 2)
    make_stalled(db, "plain", 1)
    result = db.run("drain")
    assert result.exit_code == 0, result.output
    assert "requeued 2 stalled message(s)" in result.stderr
    assert sorted(call["payload"]["n"] for call in notified()) == [0, 1]
    # a queue without the option keeps its stalled message for an operator
    assert db.sql("SELECT queue, status FROM mq_messages") == [("plain", "processing")]


def test_requeue_stalled_after_a_drain_killed_with_9(db, tmp_path, notified):
    config(
        tmp_path,
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', stalled_after: 1s, batch_size: 2,"
        " requeue_stalled: true, max_errors: 5}\n",
    )
    with backend_for(db) as b:
        b.enqueue("jobs", [b'{"sleep": 30}', b'{"sleep": 0}'])
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(tmp_path / "ran.jsonl")))
    try:
        deadline = time.monotonic() + 120  # a hang's deadline
        while db.sql("SELECT COUNT(*) FROM mq_messages WHERE status = 'processing'") != [(2,)]:
            assert time.monotonic() < deadline, "the drain never claimed"
            time.sleep(0.05)
        drain.send_signal(signal.SIGKILL)
        drain.communicate(timeout=10)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.communicate()
    time.sleep(1.5)  # past stalled_after: nobody heartbeats them any more
    assert len(gc_json(db, "--stalled")) == 2
    (tmp_path / "mq.yaml").write_text(
        (tmp_path / "mq.yaml").read_text().replace("tests.jobs:sleepy", "tests.jobs:record")
    )
    # A dead drain's messages wait liveness.GRACE before they run again: --wait.
    result = db.run("drain", "-q", "jobs", "--wait", "--max-seconds", str(GRACE + 2))
    assert result.exit_code == 0, result.output
    assert "requeued 2 stalled message(s)" in result.stderr
    assert len(notified()) == 2 and snapshot(db) == []
