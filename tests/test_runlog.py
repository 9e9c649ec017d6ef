"""The run log: a real drain records its run and its results, cheaply and never fatally."""

from __future__ import annotations

import json
import time

import pytest

from mq_cli.core.version import SCHEMA_VERSION
from mq_cli.host.runlog import Histogram

HANDLER = "tests.handlers:sleeps"


def enqueue(db, queue: str, *payloads: str) -> list[int]:
    result = db.run("enqueue", "-q", queue, *payloads)
    assert result.exit_code == 0, result.output
    return [int(x) for x in result.stdout.split()]


def runs(db) -> list[tuple]:
    return db.sql(
        "SELECT queues, queue, claimed, succeeded, failed, returned, exit_code, ended_at, "
        "started_at, pid FROM mq_messages_runs ORDER BY id"
    )


def slices(db) -> list[tuple]:
    return db.sql(
        "SELECT queue, done, failed, wait_hist, duration_hist, slice_start, slice_end "
        "FROM mq_messages_rollup ORDER BY id"
    )


def test_a_drain_records_its_run_and_results(db):
    enqueue(db, "jobs", *[json.dumps({"sleep": 0.01}) for _ in range(4)])
    enqueue(db, "jobs", '"not a mapping"')  # the handler fails on it
    result = db.run("drain", "-q", "jobs", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    [run] = runs(db)
    assert run[:7] == ("jobs", "jobs", 5, 4, 1, 0, 0)
    assert run[7] >= run[8]  # ended after it started
    now = time.time()
    assert abs(run[8] - now) < 60  # Unix seconds of the database's clock
    [(queue, done, failed, wait_hist, duration_hist, start, end)] = slices(db)
    assert (queue, done, failed) == ("jobs", 4, 1)
    assert Histogram.decode(wait_hist).total == 5
    assert Histogram.decode(duration_hist).total == 5
    assert start <= end


def test_a_drain_of_an_empty_queue_writes_nothing(db):
    result = db.run("drain", "-q", "jobs", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    assert runs(db) == [] and slices(db) == []


def test_durations_and_waits_are_measured(db):
    enqueue(db, "slow", *[json.dumps({"sleep": 0.3}) for _ in range(3)])
    result = db.run("drain", "-q", "slow", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    # One slice, or more when a loaded machine stretched the drain past SLICE_SECONDS.
    rows = slices(db)
    durations = Histogram.merged(row[4] for row in rows)
    assert sum(row[1] for row in rows) == 3
    assert 0.25 <= durations.quantile(0.5) < 0.9  # a run's 0.3 s, not the three's sum
    waits = Histogram.merged(row[3] for row in rows)
    # The third waited for the first two (~0.6 s) and the start of the runner.
    assert waits.quantile(1.0) >= 0.45
    assert waits.quantile(0.0) < 60  # only a hang fails this


def test_retention_deletes_old_runs_and_slices(db, tmp_path):
    old = time.time() - 10 * 86400
    db.sql(
        "INSERT INTO mq_messages_runs (owner, host, pid, queues, started_at, seen_at, ended_at) "
        "VALUES ('h:1:x', 'h', 1, 'jobs', %s, %s, %s)",
        (old, old, old),
    )
    db.sql(
        "INSERT INTO mq_messages_rollup (run_id, queue, slice_start, slice_end, done, failed) "
        "VALUES (1, 'jobs', %s, %s, 5, 0)",
        (old, old),
    )
    (tmp_path / "mq.yaml").write_text("run_log_retention: 2d\n")
    enqueue(db, "jobs", json.dumps({"sleep": 0}))
    result = db.run("drain", "-q", "jobs", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    assert [r[2] for r in runs(db)] == [1]  # only the new run
    assert [s[1] for s in slices(db)] == [1]


def test_run_log_retention_zero_records_nothing(db, tmp_path):
    (tmp_path / "mq.yaml").write_text("run_log_retention: 0\n")
    enqueue(db, "jobs", json.dumps({"sleep": 0}))
    result = db.run("drain", "-q", "jobs", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    assert runs(db) == []


def test_a_failing_run_log_does_not_fail_the_drain(db):
    db.sql("DROP TABLE mq_messages_rollup")
    db.sql("DROP TABLE mq_messages_runs")
    enqueue(db, "jobs", *[json.dumps({"sleep": 0}) for _ in range(3)])
    result = db.run("drain", "-q", "jobs", "--handler", HANDLER)
    assert result.exit_code == 0, result.output
    assert "run log: could not record this drain run" in result.stderr
    assert result.stderr.count("run log:") == 1  # one warning, not one per message
    assert db.sql("SELECT COUNT(*) FROM mq_messages")[0][0] == 0
    again = db.run("init")
    assert "restored table mq_messages_runs" in again.stdout, again.output
    assert runs(db) == []


def test_init_migrates_a_version_2_table(db):
    db.sql("DROP TABLE mq_messages_rollup")
    db.sql("DROP TABLE mq_messages_runs")
    db.sql("UPDATE mq_messages_meta SET value = '2' WHERE name = 'schema_version'")
    if db.kind != "sqlite":  # SQLite migrates itself on first use
        stats = db.run("stats")
        assert stats.exit_code == 3
        assert f"schema version 2 is older than this mq ({SCHEMA_VERSION}): run `mq init`" in (
            stats.stderr
        )
        assert "run log" in stats.stderr
    result = db.run("init")
    assert result.exit_code == 0, result.output
    if db.kind != "sqlite":
        assert "migrated 2 -> 3: created table mq_messages_runs" in result.stdout
    assert runs(db) == [] and slices(db) == []


def test_a_long_message_is_shown_as_running(db, tmp_path):
    ident = enqueue(db, "slow", json.dumps({"sleep": 3}))[0]
    (tmp_path / "mq.yaml").write_text("defaults: {stalled_after: 3s}\n")  # ticks every second
    proc = db.spawn("drain", "-q", "slow", "--handler", HANDLER)
    try:
        deadline = time.time() + 20
        seen = []
        while time.time() < deadline and not seen:
            time.sleep(0.2)
            try:
                seen = db.sql(
                    "SELECT running_id, running_since FROM mq_messages_runs "
                    "WHERE running_id IS NOT NULL"
                )
            except Exception:  # noqa: BLE001 - SQLite busy: look again
                seen = []
        assert seen and seen[0][0] == ident
    finally:
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    [run] = db.sql("SELECT running_id, succeeded FROM mq_messages_runs")
    assert run == (None, 1)


@pytest.mark.parametrize(
    "values, q, low, high",
    [([0.3] * 10, 0.5, 0.25, 0.36), ([0.01] * 95 + [2.0] * 5, 0.95, 0.008, 0.013),
     ([0.01] * 94 + [2.0] * 6, 0.95, 1.7, 2.3), ([0.0] * 3, 0.5, 0.0, 0.001)],
)  # fmt: skip
def test_histogram_quantiles(values, q, low, high):
    histogram = Histogram()
    for value in values:
        histogram.add(value)
    again = Histogram.decode(histogram.encode())
    assert low <= again.quantile(q) <= high
    assert Histogram().quantile(0.5) is None


def test_check_reports_the_run_log(db):
    result = db.run("check")
    assert "run log" in result.stdout and "kept for 7d00h" in result.stdout, result.output
    db.sql("DROP TABLE mq_messages_runs")
    result = db.run("check")
    line = next(x for x in result.stdout.splitlines() if "run log" in x)
    assert line.startswith("warn") and "mq_messages_runs missing" in line and "mq init" in line


@pytest.mark.slow
def test_a_waiting_drain_shows_as_live_and_writes_slices_as_it_goes(sqlite_db):
    """A long --wait drain: its row appears within a slice (20 s) even while idle, and
    the results so far are written before it ends."""
    db = sqlite_db
    assert db.run("init").exit_code == 0
    enqueue(db, "w", json.dumps({"sleep": 0}))
    proc = db.spawn("drain", "-q", "w", "--handler", HANDLER, "--wait", "--max-seconds", "600")
    try:
        # The first slice comes SLICE_SECONDS into the run (however slowly a loaded
        # machine started it): wait for it, then check the run is still going.
        deadline = time.monotonic() + 600
        while not slices(db):
            assert time.monotonic() < deadline and proc.poll() is None, "no slice written"
            time.sleep(0.5)
        live = db.sql("SELECT ended_at, succeeded FROM mq_messages_runs")
        assert live == [(None, 1)]
        assert [s[1] for s in slices(db)] == [1]  # written at the first slice
        status = db.run("status", "--json")
        assert json.loads(status.stdout)["drains"][0]["pid"] == proc.pid
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    [run] = runs(db)
    assert run[2:7] == (1, 1, 0, 0, 0) and run[7] is not None
