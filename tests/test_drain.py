"""`mq drain` through the CLI on both backends: what ran, what is left, what was recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mq_cli.drain import waiting

#: a bound that only a hang reaches (the seconds themselves are bench/'s business)
HANG = 30.0


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The list of payloads the tests.jobs handlers ran, in order."""
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))

    def read() -> list[dict]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return read


def config(tmp_path: Path, text: str) -> None:
    (tmp_path / "mq.yaml").write_text(text)


def enqueue(db, queue: str, *payloads: str, extra: tuple[str, ...] = ()) -> list[int]:
    result = db.run("enqueue", "-q", queue, *extra, *payloads)
    assert result.exit_code == 0, result.output
    return [int(x) for x in result.stdout.split()]


def rows(db, queue: str) -> list[tuple]:
    """The queue's rows with the status users see: a message stored 'delayed' (not
    due yet, schema 4) is a ready one."""
    return db.sql(
        "SELECT id, CASE WHEN status = 'delayed' THEN 'ready' ELSE status END, error_count, "
        "last_error, owner FROM mq_messages WHERE queue = %s ORDER BY id",
        (queue,),
    )


def test_drain_runs_every_message_once_and_deletes_it(db, ran):
    enqueue(db, "jobs", *[json.dumps({"n": i}) for i in range(25)])
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record")
    assert result.exit_code == 0, result.output
    assert result.output == ""  # silent on success: cron mails any output
    assert sorted(r["payload"]["n"] for r in ran()) == list(range(25))
    assert rows(db, "jobs") == []


def test_drain_uses_the_configured_handler_and_every_configured_queue(db, ran, tmp_path):
    config(
        tmp_path,
        "queues:\n  a: {handler: 'tests.jobs:record'}\n  b: {handler: 'tests.jobs:Counter'}\n",
    )
    enqueue(db, "a", '"a1"', '"a2"')
    enqueue(db, "b", '"b1"', '"b2"', '"b3"')
    result = db.run("drain")
    assert result.exit_code == 0, result.output
    done = ran()
    assert [r["payload"] for r in done] == ["a1", "a2", "b1", "b2", "b3"]
    # the class is instantiated once per drain: the instance counted b1..b3
    assert [r.get("seen") for r in done[2:]] == [1, 2, 3]


def test_failure_records_error_and_backs_off(db, ran, tmp_path):
    config(tmp_path, "defaults: {retry_delay: 60s, max_errors: 5}\n")
    (bad,) = enqueue(db, "jobs", '{"fail": true, "n": 7}')
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked")
    assert result.exit_code == 0  # failures are recorded, the drain did its job
    assert f"message {bad} failed (attempt 1 of 5" in result.stderr
    assert "boom 7" in result.stderr
    ((_, status, errors, last_error, owner),) = rows(db, "jobs")
    assert (status, errors, owner) == ("ready", 1, None)
    assert "ValueError: boom 7" in last_error
    stats = json.loads(db.run("stats", "--json").stdout)["jobs"]
    assert stats["delayed"] == 1 and stats["ready"] == 0  # backing off, not ready yet
    # a second drain right away does not run it again
    db.run("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked")
    assert len(ran()) == 1


def test_failing_message_ends_failed_after_max_errors(db, ran, tmp_path):
    config(tmp_path, "defaults: {retry_delay: 0, max_errors: 3}\n")
    enqueue(db, "jobs", '{"fail": true}', '{"fail": false}')
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked")
    assert result.exit_code == 0
    assert "failed for good after 3 attempt(s)" in result.stderr
    ((_, status, errors, last_error, _),) = rows(db, "jobs")
    assert (status, errors) == ("failed", 3)
    assert "boom" in last_error
    assert len(ran()) == 4  # three tries of the bad one, one of the good one
    # a failed message is kept for an operator, never run again by drain
    db.run("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked")
    assert len(ran()) == 4


def test_priority_then_age_and_delay_respected(db, ran):
    enqueue(db, "jobs", '"low1"', '"low2"')
    enqueue(db, "jobs", '"high"', extra=("--priority", "5"))
    enqueue(db, "jobs", '"later"', extra=("--delay", "1h", "--priority", "9"))
    enqueue(db, "jobs", '"mid"', extra=("--priority", "1"))
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record", "--batch-size", "1")
    assert result.exit_code == 0, result.output
    assert [r["payload"] for r in ran()] == ["high", "mid", "low1", "low2"]
    assert [r[1] for r in rows(db, "jobs")] == ["ready"]  # the delayed one waits


def test_max_messages_leaves_the_rest_ready(db, ran):
    enqueue(db, "jobs", *[str(i) for i in range(10)])
    result = db.run(
        "drain", "-q", "jobs", "--handler", "tests.jobs:record", "--max-messages", "3",
        "--batch-size", "10",
    )  # fmt: skip
    assert result.exit_code == 0
    assert [r["payload"] for r in ran()] == [0, 1, 2]
    left = rows(db, "jobs")
    assert len(left) == 7 and {r[1] for r in left} == {"ready"}


def test_max_seconds_returns_unstarted_messages_at_once(db, ran):
    enqueue(db, "jobs", *[json.dumps({"sleep": 0.4, "n": i}) for i in range(8)])
    result = db.run(
        "drain", "-q", "jobs", "--handler", "tests.jobs:sleepy", "--max-seconds", "1",
        "--batch-size", "8", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    done = len(ran())
    # Stopped at the deadline, not after the batch (8 x 0.4 s): some never started.
    # (How many did is the machine's business: its handler child may start late.)
    assert done < 8
    assert report["succeeded"] == done and report["returned"] == 8 - done
    # nothing is left processing (it would go stalled): all back to ready
    assert {r[1] for r in rows(db, "jobs")} == {"ready"}
    assert len(rows(db, "jobs")) == 8 - done


def test_wait_polls_until_max_seconds(db, ran):
    started = time.monotonic()
    result = db.run(
        "drain", "-q", "jobs", "--handler", "tests.jobs:record", "--wait", "--max-seconds", "1.5"
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == 0
    assert 1.4 <= elapsed < HANG  # it waited, until --max-seconds


def test_a_waiting_drain_retries_when_the_backoff_ends_not_at_its_next_poll(
    db, ran, tmp_path, monkeypatch
):
    # A waiting drain backs off to one poll a second when idle; a retry it
    # recorded itself is due at a moment it knows, and starts then. Its polls are
    # pushed past the test (the drain runs in this process): a retry that starts
    # at all was started by its due time, not by a poll. How soon after it is due
    # is the machine's business.
    # Backoff 0.8 s, then 1.6 s; a second message, failing once, adds a retry
    # due between the two. Five runs in all: --max-messages ends the drain.
    monkeypatch.setattr(waiting, "WAIT_POLL_MIN", 3600.0)
    monkeypatch.setattr(waiting, "WAIT_POLL_MAX", 3600.0)
    config(tmp_path, "defaults: {retry_delay: 0.8, max_errors: 5}\n")
    enqueue(db, "jobs", '{"fails": 2}', '{"fails": 1}')
    result = db.run(
        "drain", "-q", "jobs", "--handler", "tests.jobs:fail_first", "--wait",
        "--max-seconds", str(HANG), "--max-messages", "5", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = [r for r in ran() if r["payload"]["fails"] == 2]
    assert [r["error_count"] for r in runs] == [0, 1, 2]
    assert runs[1]["t"] - runs[0]["t"] >= 0.75  # not before the backoff
    assert runs[2]["t"] - runs[1]["t"] >= 1.55
    assert runs[2]["t"] - runs[0]["t"] < HANG  # then, not at --max-seconds
    assert len(ran()) == 5
    assert rows(db, "jobs") == []


def test_timeout_of_a_hanging_python_handler(db, ran, tmp_path):
    config(tmp_path, "defaults: {timeout: 1s, retry_delay: 1h}\n")
    hang, fine = enqueue(db, "jobs", '{"sleep": 60}', '{"sleep": 0}')
    started = time.monotonic()
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:sleepy", "--batch-size", "1")
    assert result.exit_code == 0
    assert time.monotonic() - started < HANG  # the timeout, not the handler's 60 s
    assert [r["payload"] for r in ran()] == [{"sleep": 0}]  # the drain went on
    ((ident, status, errors, last_error, _),) = rows(db, "jobs")
    assert (ident, status, errors) == (hang, "ready", 1)
    assert "timed out" in last_error


def test_timeout_of_a_hanging_exec_handler(db, tmp_path):
    config(tmp_path, "defaults: {timeout: 1s, retry_delay: 1h}\n")
    enqueue(db, "jobs", '"x"')
    started = time.monotonic()
    result = db.run("drain", "-q", "jobs", "--handler", "exec:sleep 60")
    assert result.exit_code == 0
    assert time.monotonic() - started < HANG  # the timeout, not the handler's 60 s
    ((_, status, errors, last_error, _),) = rows(db, "jobs")
    assert (status, errors) == ("ready", 1) and "timed out" in last_error


def test_exec_handler_gets_raw_bytes_on_stdin(db, tmp_path):
    out = tmp_path / "out.bin"
    config(tmp_path, "queues:\n  raw: {format: bytes}\n")
    payload = bytes(range(256)) * 3
    result = db.run("enqueue", "-q", "raw", input=payload)
    assert result.exit_code == 0, result.output
    result = db.run("drain", "-q", "raw", "--handler", f"exec:sh -c 'cat > {out}'")
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == payload
    assert rows(db, "raw") == []


def test_exec_failure_keeps_the_end_of_stderr(db, tmp_path):
    config(tmp_path, "defaults: {retry_delay: 1h}\n")
    enqueue(db, "jobs", '"x"')
    result = db.run(
        "drain", "-q", "jobs", "--handler", "exec:sh -c 'echo lots >&2; echo disk full >&2; exit 3'"
    )
    assert result.exit_code == 0
    ((_, status, errors, last_error, _),) = rows(db, "jobs")
    assert (status, errors) == ("ready", 1)
    assert "disk full" in last_error and "3" in last_error


def test_handler_gets_message_metadata(db, ran):
    (ident,) = enqueue(db, "jobs", '{"k": 1}')
    db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record_meta")
    (entry,) = ran()
    assert entry["id"] == ident and entry["queue"] == "jobs" and entry["error_count"] == 0


@pytest.mark.parametrize(
    "handler",
    ["tests.jobs:nonexistent", "tests.nomodule:record", "exec:/no/such/program", "nocolon"],
)
def test_unimportable_handler_is_exit_2_and_touches_nothing(db, handler):
    enqueue(db, "jobs", '"x"')
    result = db.run("drain", "-q", "jobs", "--handler", handler)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("mq: ")
    assert [(r[1], r[2], r[4]) for r in rows(db, "jobs")] == [("ready", 0, None)]


def test_queue_without_handler_is_a_configuration_error(db):
    enqueue(db, "jobs", '"x"')
    result = db.run("drain", "-q", "jobs")
    assert result.exit_code == 2
    assert "no handler" in result.stderr and "--handler" in result.stderr


def test_no_queue_at_all_is_a_configuration_error(db):
    result = db.run("drain")
    assert result.exit_code == 2
    assert "no queue to drain" in result.stderr


def test_unique_retention_keeps_the_key_after_success(db, ran, tmp_path):
    config(tmp_path, "queues:\n  once: {handler: 'tests.jobs:record', unique_retention: 1h}\n")
    enqueue(db, "once", '"first"', extra=("--unique-key", "k1"))
    assert db.run("drain", "-q", "once").exit_code == 0
    again = db.run("enqueue", "-q", "once", "--unique-key", "k1", '"second"')
    assert again.exit_code == 0 and again.stdout == ""
    assert "skipped" in again.stderr
    assert db.run("drain", "-q", "once").exit_code == 0
    assert [r["payload"] for r in ran()] == ["first"]
    # the tombstone holds no payload and does not count as a message
    stats = json.loads(db.run("stats", "--json").stdout)["once"]
    assert stats["ready"] == 0 and stats["processing"] == 0


def test_without_retention_a_done_key_is_free_again(db, ran):
    enqueue(db, "jobs", '"first"', extra=("--unique-key", "k1"))
    db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record")
    enqueue(db, "jobs", '"second"', extra=("--unique-key", "k1"))
    db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record")
    assert [r["payload"] for r in ran()] == ["first", "second"]


def test_json_summary(db, ran, tmp_path):
    config(tmp_path, "defaults: {retry_delay: 1h}\n")
    enqueue(db, "jobs", '{"fail": false}', '{"fail": true}', '{"fail": false}')
    result = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked", "--json")
    report = json.loads(result.stdout)
    assert report["claimed"] == 3 and report["succeeded"] == 2 and report["failed"] == 1
    assert report["returned"] == 0 and report["queues"] == ["jobs"]


def test_verbose_logs_each_message(db, ran):
    (ident,) = enqueue(db, "jobs", '"x"')
    result = db.run("-v", "drain", "-q", "jobs", "--handler", "tests.jobs:record")
    assert f"message {ident} done" in result.stderr


def test_group_ack_deletes_a_batch_in_one_statement(db, ran, tmp_path):
    config(
        tmp_path,
        "defaults: {retry_delay: 1h}\n"
        "queues:\n  jobs: {handler: 'tests.jobs:fail_when_asked', group_ack: true, batch_size: 50}\n",
    )
    payloads = [json.dumps({"n": i, "fail": i % 10 == 3}) for i in range(120)]
    enqueue(db, "jobs", *payloads)
    result = db.run("-v", "drain", "-q", "jobs", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["succeeded"] == 108 and report["failed"] == 12
    assert "(one acknowledgement)" in result.stderr
    assert len(ran()) == 120
    left = rows(db, "jobs")  # only the failures are left, backing off
    assert len(left) == 12 and {r[1] for r in left} == {"ready"}


def test_group_ack_deletes_a_batch_with_the_next_claim(db, ran, tmp_path, monkeypatch):
    """A batch's last group goes with the next claim (one commit on PostgreSQL);
    a drain that stops after a batch (--max-messages) deletes it on its own."""
    from mq_cli.backends.mysql import MysqlBackend
    from mq_cli.backends.postgres import PostgresBackend
    from mq_cli.backends.sqlcore import SqlBackend

    calls: list[int] = []
    # claim_ahead_send: PostgreSQL and MariaDB send the next claim while a batch runs
    # (no --max-messages), with the successes so far.
    for cls, name in (
        (PostgresBackend, "claim_acking"),
        (SqlBackend, "claim_acking"),
        (PostgresBackend, "claim_ahead_send"),
        (MysqlBackend, "claim_ahead_send"),
    ):
        original = getattr(cls, name)

        def spy(self, queue, limit, owner, done, original=original):
            calls.append(len(done))
            return original(self, queue, limit, owner, done)

        monkeypatch.setattr(cls, name, spy)
    config(
        tmp_path,
        "queues:\n  jobs: {handler: 'tests.jobs:record', group_ack: true, batch_size: 10,"
        " ack_delay: 1h}\n",
    )
    enqueue(db, "jobs", *[json.dumps({"n": i}) for i in range(35)])
    result = db.run("drain", "-q", "jobs", "--json", "--max-messages", "25")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["succeeded"] == 25
    assert calls == [10, 10]  # batches 1 and 2 left with claims 2 and 3
    assert len(rows(db, "jobs")) == 10  # batch 3 (5 messages) deleted at the stop
    result = db.run("drain", "-q", "jobs", "--json")
    assert json.loads(result.stdout)["succeeded"] == 10
    # Its claims deleted the group: the last, which found nothing, and on PostgreSQL
    # and MariaDB the one it sent ahead while the batch ran, with the successes so far.
    assert calls[:2] == [10, 10] and sum(calls[2:]) == 10, calls
    assert len(calls) >= 3, calls
    assert rows(db, "jobs") == [] and len(ran()) == 35


def test_group_ack_does_not_hold_a_success_back_behind_a_slow_handler(db, ran, tmp_path):
    """group_ack commits a group once its oldest success has waited ack_delay: a
    long handler that follows does not keep the first message in the table."""
    config(
        tmp_path,
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', group_ack: true, batch_size: 2,"
        " ack_delay: 50ms}\n",
    )
    fast, slow = enqueue(db, "jobs", '{"n": 1}', '{"n": 2, "sleep": 6}')
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(tmp_path / "ran.jsonl")))
    try:
        deadline = time.monotonic() + HANG
        while not ran() and time.monotonic() < deadline:
            time.sleep(0.02)
        done_at = time.monotonic()
        while [r[0] for r in rows(db, "jobs")] != [slow] and time.monotonic() < deadline:
            time.sleep(0.02)
        waited = time.monotonic() - done_at
        assert [r[0] for r in rows(db, "jobs")] == [slow], "the fast message was not deleted"
        # The order of events: the fast one's DELETE came while the slow handler ran
        # (it logs at its end), not at the batch's end.
        assert [r["payload"]["n"] for r in ran()] == [1], "the slow handler ended first"
    finally:
        out, err = drain.communicate(timeout=HANG)
    print(f"\nFIGURES group_ack ({db.kind}): the first success waited {waited:.2f} s")
    assert drain.returncode == 0, err
    assert rows(db, "jobs") == []
    assert fast != slow


def test_group_ack_still_keeps_unique_tombstones(db, ran, tmp_path):
    config(
        tmp_path,
        "queues:\n  jobs: {handler: 'tests.jobs:record', group_ack: true, unique_retention: 1h}\n",
    )
    enqueue(db, "jobs", '"keyed"', extra=("--unique-key", "k"))
    enqueue(db, "jobs", '"plain"')
    assert db.run("drain", "-q", "jobs").exit_code == 0
    assert db.run("enqueue", "-q", "jobs", "--unique-key", "k", '"again"').stdout == ""
    assert sorted(r["payload"] for r in ran()) == ["keyed", "plain"]


def test_handler_that_cannot_start_in_its_worker_gives_the_batch_back(db):
    # It imports in the drain (checked before claiming) but its constructor
    # fails in the worker: a broken handler, not failing messages.
    ids = enqueue(db, "jobs", '"a"', '"b"', '"c"')
    result = db.run("drain", "-q", "jobs", "--handler", "tests.handlers:BreaksOnBuild")
    assert result.exit_code == 2, result.output
    assert "no database configured" in result.stderr and "Traceback" not in result.stderr
    assert rows(db, "jobs") == [(i, "ready", 0, None, None) for i in ids]


def test_an_empty_queue_starts_no_worker(db):
    # Every cron minute on an idle queue: no second interpreter. The handler
    # would fail in a worker, so exit 0 shows none was started.
    result = db.run("drain", "-q", "jobs", "--handler", "tests.handlers:BreaksOnBuild")
    assert result.exit_code == 0, result.output


def test_quiet_retries_log_only_failures_for_good(db, ran, tmp_path):
    config(
        tmp_path,
        "queues:\n  q:\n    handler: 'tests.jobs:fail_when_asked'\n    max_errors: 3\n"
        "    retry_delay: 1s\n    quiet_retries: true\n",
    )
    enqueue(db, "q", '{"fail": true, "n": 1}')
    first = db.run("drain", "-q", "q")
    assert first.exit_code == 0, first.output
    assert first.stderr == ""  # to be retried: nothing for cron to mail
    assert rows(db, "q")[0][1:3] == ("ready", 1)
    time.sleep(1.2)
    shown = db.run("-v", "drain", "-q", "q")
    assert "failed (attempt 2 of 3" in shown.stderr  # -v still shows each attempt
    time.sleep(2.2)
    last = db.run("drain", "-q", "q")
    assert "failed for good after 3 attempt(s)" in last.stderr
    assert rows(db, "q")[0][1:3] == ("failed", 3)


def test_handler_prints_never_reach_the_json_summary(db, tmp_path):
    """A real `mq drain --json` process: stdout is the summary alone, whatever the
    handler prints; the end of its output goes to stderr."""
    payload = json.dumps({"size": 3_000_000})
    assert db.run("enqueue", "-q", "p", payload, payload).exit_code == 0
    # One message a batch: none is handed to the worker while the last one's output
    # is still being read, so each message's tail is its own.
    proc = db.spawn(
        "drain", "-q", "p", "--handler", "tests.handlers:prints_a_lot", "--json",
        "--batch-size", "1",
    )  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["succeeded"] == 2
    assert err.decode().count("the last words") == 2
    assert len(err) < 100_000


def test_a_full_disk_during_a_drain_says_how_to_recover(sqlite_db):
    """exit 3 with the hint: the message stays processing and gc recovers it."""
    db = sqlite_db
    assert db.run("init").exit_code == 0
    wal = f"{db.tmp / 'mq.db'}-wal"
    enqueue(db, "full", json.dumps({"wal": wal}))
    proc = db.spawn("drain", "-q", "full", "--handler", "tests.handlers:fills_the_disk")
    out, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 3, text
    assert "SQLite database" in text and "Traceback" not in text
    assert "stays processing" in text and "mq gc --stalled --requeue" in text
    assert len(text.strip().splitlines()) == 2
    assert [r[0] for r in db.sql("SELECT status FROM mq_messages")] == ["processing"]
