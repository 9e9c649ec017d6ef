"""A step of the database's clock never makes a held message stalled, nor hides a fresh one.

SQLite's clock is the host's: one mq process at a time runs under libfaketime
(`faketime -f +2h`) with the kernel's monotonic and boot clocks left alone, as
a real `date -s` or a VM snapshot restore would leave them. The machine's clock
is never touched. On MariaDB a session's `SET timestamp` moves UTC_TIMESTAMP()
for that connection only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import IN_CI

pytestmark = pytest.mark.skipif(
    shutil.which("faketime") is None and not IN_CI,
    reason="faketime is not installed (tests/faketime.sh installs it)",
)


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def mq(
    db, *args: str, shift: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """A real `mq` process; with ``shift`` (e.g. "+2h") its wall clock is moved."""
    env = db.env()
    prefix: list[str] = []
    if shift is not None:
        # The step moves the wall clock only: monotonic and boot clocks go on.
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        prefix = ["faketime", "-f", shift]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "mq_cli", *args],
        cwd=db.tmp, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def wait_for(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_forward_step_does_not_hand_a_held_message_to_a_second_drain(sqlite_db, ran):
    sqlite_db.tmp.joinpath("mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:wait_for_file', stalled_after: 1h, "
        "requeue_stalled: true, concurrency: 2}\n"
    )
    # The handler runs until the test has looked (however slow the machine).
    release = sqlite_db.tmp / "release"
    payload = json.dumps({"until": str(release)})
    assert mq(sqlite_db, "enqueue", "-q", "jobs", payload).returncode == 0
    first = sqlite_db.spawn("drain", "-q", "jobs")
    try:
        wait_for(lambda: sqlite_db.sql("SELECT status FROM mq_messages") == [("processing",)])
        # The host's clock jumps 2 h ahead while the handler runs (6 s).
        gc = mq(sqlite_db, "gc", "--stalled", "--requeue", shift="+2h")
        assert gc.returncode == 0, gc.stderr
        assert "clock stepped" in gc.stderr
        second = mq(sqlite_db, "drain", "-q", "jobs", shift="+2h")
        assert second.returncode == 0, second.stderr
        assert sqlite_db.sql("SELECT status, error_count FROM mq_messages") == [("processing", 0)]
        stats = mq(sqlite_db, "stats", "--json", shift="+2h")
        assert json.loads(stats.stdout)["jobs"]["stalled"] == 0
    finally:
        release.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    # one run, by the first drain
    assert [(r["event"], r["pid"]) for r in ran()] == [
        ("start", ran()[0]["pid"]),
        ("end", ran()[0]["pid"]),
    ]
    assert sqlite_db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_dead_drains_message_is_still_recovered_stalled_after_past_the_step(sqlite_db):
    sqlite_db.tmp.joinpath("mq.yaml").write_text("queues:\n  jobs: {stalled_after: 2s}\n")
    assert mq(sqlite_db, "enqueue", "-q", "jobs", "1").returncode == 0
    # A drain that died holding it, long ago.
    sqlite_db.sql(
        "UPDATE mq_messages SET status = 'processing', owner = 'dead:1:x', "
        "heartbeat_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')"
    )
    assert mq(sqlite_db, "gc", "--stalled").returncode == 0  # this host's clock record
    stepped = mq(sqlite_db, "gc", "--stalled", "--requeue", shift="+2h")
    assert "clock stepped" in stepped.stderr
    assert sqlite_db.sql("SELECT status FROM mq_messages") == [("processing",)]
    time.sleep(2.5)  # stalled_after since the step, on the stepped clock
    later = mq(sqlite_db, "gc", "--stalled", "--requeue", shift="+2h")
    assert later.returncode == 0, later.stderr
    assert sqlite_db.sql("SELECT status, error_count FROM mq_messages") == [("ready", 1)]


def test_a_step_back_does_not_hide_a_fresh_message(sqlite_db, ran):
    # The clock is 2 h ahead while these are stored, then stepped back to the
    # right time (libfaketime mishandles sleeps with a negative offset, so the
    # drain runs on the real clock and the producer on the wrong one).
    assert mq(sqlite_db, "enqueue", "-q", "jobs", '{"n": 1}', shift="+2h").returncode == 0
    delayed = mq(sqlite_db, "enqueue", "-q", "jobs", "--delay", "30m", '{"n": 2}', shift="+2h")
    assert delayed.returncode == 0
    # The first message must not wait 1h59m.
    result = mq(sqlite_db, "drain", "-q", "jobs", "--handler", "tests.jobs:record")
    assert result.returncode == 0, result.stderr
    assert "clock stepped" in result.stderr
    assert [r["payload"] for r in ran()] == [{"n": 1}]
    # The delayed one keeps its delay, counted from the new clock's now.
    left = sqlite_db.sql(
        "SELECT (julianday(available_at) - julianday('now')) * 86400 FROM mq_messages"
    )
    assert len(left) == 1 and 1790 < left[0][0] <= 1800


def test_mariadb_server_clock_step_is_seen_through_the_session(mysql_db):
    """The same detection on MariaDB's clock: UTC_TIMESTAMP() of mq's own session moved."""
    from mq_cli.backends import open_backend
    from mq_cli.backends.mysql.dialect import MysqlBackend
    from mq_cli.core.dburl import parse_database_url
    from mq_cli.host import clock

    assert mysql_db.run("init").exit_code == 0
    backend = open_backend(parse_database_url(mysql_db.url), "mq_messages")
    assert isinstance(backend, MysqlBackend)
    with backend:
        assert clock.observe(backend).step_at is None
        with backend.conn.cursor() as cursor:
            cursor.execute("SET timestamp = UNIX_TIMESTAMP() + 7200")
        state = clock.observe(backend)
        assert state.step_at is not None
        assert state.stalled_resumes(3600) is not None
        # Stored while the clock was 2 h ahead: one ready now, one delayed 30 min.
        backend.enqueue("jobs", [b"1"])
        backend.enqueue("jobs", [b"2"], delay=1800)
        with backend.conn.cursor() as cursor:
            cursor.execute("SET timestamp = DEFAULT")
        back = clock.observe(backend)  # and back again: a step back
        assert back.step_at is not None and back.step_at < state.step_at
        assert [m.payload for m in backend.claim("jobs", 10, "me")] == [b"1"]
    left = mysql_db.sql(
        "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), available_at) FROM mq_messages "
        "WHERE status IN ('ready', 'delayed')"
    )
    assert len(left) == 1 and 1790 < left[0][0] <= 1800
