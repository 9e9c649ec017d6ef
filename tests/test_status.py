"""`mq status`: live drains, recent runs and per-queue figures from the run log, as text and JSON."""

from __future__ import annotations

import json
import os
import socket
import time

HANDLER = "tests.handlers:sleeps"
QUEUE_KEYS = {
    "ready", "delayed", "processing", "stalled", "failed", "oldest_ready_seconds", "paused",
    "last_minute", "last_hour", "wait_seconds", "duration_seconds",
    "max_drains", "rate_limit", "cannot_start",  # the third round's fleet limits, why none started
}  # fmt: skip
RUN_KEYS = {
    "id", "owner", "host", "pid", "queue", "queues", "state", "started_at", "ended_at",
    "seconds", "claimed", "succeeded", "failed", "returned", "exit_code",
    "ended", "stop_request",  # the fifth round's `mq stop`: why a run ended, who asked
}  # fmt: skip
DRAIN_KEYS = (RUN_KEYS - {"ended_at", "exit_code", "ended"}) | {"seen_at", "held", "running"}


def enqueue(db, queue: str, *payloads: str) -> list[int]:
    result = db.run("enqueue", "-q", queue, *payloads)
    assert result.exit_code == 0, result.output
    return [int(x) for x in result.stdout.split()]


def drain(db, queue: str) -> None:
    result = db.run("drain", "-q", queue, "--handler", HANDLER)
    assert result.exit_code == 0, result.output


def status(db, *args: str) -> dict:
    result = db.run("status", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sleeps(*seconds: float) -> list[str]:
    return [json.dumps({"sleep": s}) for s in seconds]


def test_status_on_an_empty_database(db):
    found = status(db)
    # PostgreSQL only; its content is the shared server's (other sessions, slots)
    horizon = found.pop("vacuum_horizon", None)
    assert (horizon is not None) == (db.kind == "postgres")
    if horizon is not None:
        assert set(horizon) == {
            "oldest_transaction", "standbys", "replication_slots", "prepared_transactions",
        }  # fmt: skip
    assert {k: v for k, v in found.items() if k != "now"} == {
        "drains": [], "runs": [], "queues": {},
    }  # fmt: skip
    result = db.run("status")
    assert result.exit_code == 0, result.output
    assert "live drains: none" in result.stdout
    assert "recent runs: none recorded" in result.stdout


def test_status_of_an_unknown_queue_says_so(db):
    enqueue(db, "mail", '{"x": 1}')
    result = db.run("status", "-q", "mial")
    assert result.exit_code == 2
    assert "queue 'mial' is unknown" in result.stderr and "queues: mail" in result.stderr


def test_status_after_a_drain(db):
    enqueue(db, "jobs", *sleeps(0, 0, 0), '"not a mapping"')
    drain(db, "jobs")
    enqueue(db, "jobs", *sleeps(0))  # one left ready
    found = status(db)
    assert found["drains"] == []
    [run] = found["runs"]
    assert set(run) == RUN_KEYS
    assert run["state"] == "ended" and run["exit_code"] == 0
    assert run["ended"] == "empty" and run["stop_request"] is None
    assert (run["claimed"], run["succeeded"], run["failed"], run["returned"]) == (4, 3, 1, 0)
    assert run["host"] == socket.gethostname() and run["queue"] == "jobs"
    assert run["started_at"].endswith("Z") and run["ended_at"] >= run["started_at"]
    jobs = found["queues"]["jobs"]
    assert set(jobs) == QUEUE_KEYS
    assert jobs["ready"] == 1 and jobs["paused"] is False
    assert jobs["max_drains"] is None and jobs["rate_limit"] is None
    assert jobs["cannot_start"] is None
    assert jobs["last_minute"] == {"done": 3, "failed": 1}
    assert jobs["last_hour"] == {"done": 3, "failed": 1}
    assert set(jobs["wait_seconds"]) == {"p50", "p95"}
    assert jobs["duration_seconds"]["p50"] is not None
    text = db.run("status")
    assert text.exit_code == 0, text.output
    assert "jobs" in text.stdout and "3/1" in text.stdout


def test_percentiles_come_from_the_handlers_durations(db):
    enqueue(db, "timed", *sleeps(0.1, 0.1, 0.1, 0.6))
    drain(db, "timed")
    took = status(db, "-q", "timed")["queues"]["timed"]["duration_seconds"]
    # p50 from the three 0.1 s runs, p95 from the 0.6 s one: told apart at their
    # midpoint, not by how little a loaded machine adds to a sleep.
    assert 0.08 <= took["p50"] < 0.35 <= took["p95"], took
    assert took["p95"] >= 0.5, took
    wait = status(db, "-q", "timed")["queues"]["timed"]["wait_seconds"]
    assert wait["p95"] >= 0.25  # the last one waited for the three before it


def test_status_narrowed_to_a_queue(db):
    enqueue(db, "a", *sleeps(0))
    enqueue(db, "b", *sleeps(0, 0))
    drain(db, "a")
    drain(db, "b")
    found = status(db, "-q", "a")
    assert list(found["queues"]) == ["a"]
    assert [r["queue"] for r in found["runs"]] == ["a"]
    assert set(status(db)["queues"]) == {"a", "b"}


def test_a_paused_queue_shows_paused(db):
    assert db.run("pause", "-q", "mail").exit_code == 0
    assert status(db)["queues"]["mail"]["paused"] is True
    assert "mail (paused)" in db.run("status").stdout


def test_a_drain_that_vanished_is_no_live_drain(db):
    old = time.time() - 3600
    db.sql(
        "INSERT INTO mq_messages_runs (owner, host, pid, queues, queue, started_at, seen_at) "
        "VALUES ('h:1:x', 'h', 1, 'jobs', 'jobs', %s, %s)",
        (old, old),
    )
    found = status(db)
    assert found["drains"] == []
    assert [r["state"] for r in found["runs"]] == ["vanished"]


def test_a_live_drain_with_its_running_message(db, tmp_path):
    ident = enqueue(db, "slow", *sleeps(4))[0]
    enqueue(db, "slow", *sleeps(0))
    (tmp_path / "mq.yaml").write_text("defaults: {stalled_after: 3s, batch_size: 2}\n")
    proc = db.spawn("drain", "-q", "slow", "--handler", HANDLER)
    try:
        deadline = time.time() + 20
        drains: list = []
        while time.time() < deadline:
            time.sleep(0.3)
            result = db.run("status", "--json")
            if result.exit_code == 0:
                drains = json.loads(result.stdout)["drains"]
                if drains and drains[0]["running"]:
                    break
        assert drains, "no live drain seen"
        [live] = drains
        assert set(live) == DRAIN_KEYS
        assert live["pid"] == proc.pid and live["queue"] == "slow"
        assert live["state"] == "live" and live["held"] == 2
        assert live["running"]["id"] == ident and live["running"]["seconds"] >= 1
        assert live["seconds"] >= live["running"]["seconds"]
        shown = db.run("status").stdout
        assert f"#{ident} for" in shown and f":{proc.pid}" in shown
    finally:
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    found = status(db)
    assert found["drains"] == [] and found["runs"][0]["succeeded"] == 2
    assert os.getpid() != proc.pid


def test_prometheus_counters_and_summaries(db, tmp_path):
    from tests.test_check_prometheus import parse_textfile

    enqueue(db, "jobs", *sleeps(0.1, 0.1, 0.1), '"not a mapping"')
    drain(db, "jobs")
    enqueue(db, "jobs", *sleeps(0.1))
    drain(db, "jobs")
    out = tmp_path / "mq.prom"
    result = db.run("stats", "--prometheus", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "# TYPE mq_succeeded_total counter" in text and "retained history" in text
    assert "# TYPE mq_wait_seconds summary" in text
    samples = parse_textfile(text)
    jobs = (("queue", "jobs"),)
    assert samples[("mq_succeeded_total", jobs)] == 4
    assert samples[("mq_failed_total", jobs)] == 1
    assert samples[("mq_duration_seconds_count", jobs)] == 5
    p95 = ("mq_duration_seconds", (("quantile", "0.95"), ("queue", "jobs")))
    assert 0.08 <= samples[p95] < 0.4  # a quantile of 0.1 s runs, not their sum
    assert ("mq_wait_seconds", (("quantile", "0.5"), ("queue", "jobs"))) in samples
    enqueue(db, "other", '"waits"')
    narrowed = db.run("stats", "-q", "other", "--prometheus", str(out))
    assert narrowed.exit_code == 0, narrowed.output
    assert 'mq_succeeded_total{queue="other"} 0' in out.read_text()


def test_status_without_the_run_log_tables_says_to_run_init(db, tmp_path):
    enqueue(db, "jobs", *sleeps(0))
    db.sql("DROP TABLE mq_messages_rollup")
    result = db.run("status")
    assert result.exit_code == 3
    assert "mq_messages_rollup are missing: run `mq init`" in result.stderr
    out = tmp_path / "mq.prom"  # the gauges still come, but not as if all were well
    stats = db.run("stats", "--prometheus", str(out))
    assert stats.exit_code == 3, stats.output
    assert "mq_messages_rollup are missing: run `mq init`" in stats.stderr
    assert 'mq_messages{queue="jobs",state="ready"} 1' in out.read_text()
    assert "mq_succeeded_total" not in out.read_text()
    assert db.run("init").exit_code == 0
    assert db.run("status").exit_code == 0
