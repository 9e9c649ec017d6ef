"""mq through a real PgBouncer (tests/pooler.py) in transaction and in session mode:
the commands work, `mq check` says what degrades, and a drain says so at -v.

Slow scenarios (four drains over 3,000 messages, kill -9) are in
tests/faults/test_poolers.py."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from tests.conftest import Db


def check_lines(db: Db, *args: str) -> dict[str, str]:
    result = db.run(*args, "check")
    lines = {}
    for line in result.stdout.splitlines():
        match = re.match(r"(ok|warn|FAIL)\s+(\S+(?: \S+)*?)\s{2,}(.*)", line)
        if match:
            lines[match.group(2)] = f"{match.group(1)} {match.group(3)}"
    return lines


@pytest.mark.parametrize(
    "database, words",
    [
        ("{kind: mysql, database: app, pooler: transaction}", "only for PostgreSQL"),
        ("{url: 'sqlite:///x.db', pooler: none}", "only for PostgreSQL"),
        ("{kind: postgresql, database: app, pooler: statement}", "expected one of auto, none"),
    ],
)
def test_the_pooler_key_is_checked(sqlite_db, tmp_path, database, words):
    (tmp_path / "mq.yaml").write_text(f"database: {database}\n")
    result = sqlite_db.run("-c", str(tmp_path / "mq.yaml"), "stats", env={"MQ_DATABASE_URL": None})
    assert result.exit_code == 2
    assert "database.pooler" in result.stderr and words in result.stderr
    assert "mq.yaml, line 1" in result.stderr


def test_check_is_truthful_through_a_transaction_pooler(pgbouncers, tmp_path):
    from tests.conftest import pooled

    for db in pooled(pgbouncers, "transaction", tmp_path):
        lines = check_lines(db)
        assert lines["pooler"].startswith("warn transaction mode (assumed: a pooler answered")
        assert "short stalled_after" in lines["pooler degrades"]
        assert "session-mode pool" in lines["pooler degrades"]
        assert "LISTEN" in lines["pooler degrades"]
        assert lines["dead drains"].startswith("warn seen only after stalled_after")
        assert "session lock" not in lines["dead drains"].replace("no session", "")
        # Said by the config: no guess.
        lines = check_lines(db, "-d", db.url + "?pooler=transaction")
        assert lines["pooler"] == "warn transaction mode (pooler: transaction)"


def test_check_through_a_session_pooler_says_everything_works(pgbouncers, tmp_path):
    from tests.conftest import pooled

    for db in pooled(pgbouncers, "session", tmp_path, "session"):
        lines = check_lines(db)
        assert lines["pooler"].startswith("ok session mode (pooler: session; a pooler answered")
        assert lines["dead drains"] == "ok seen at once: each drain holds a session lock"
        assert "pooler degrades" not in lines


def test_a_statement_pooler_is_named_not_taken_for_a_lost_connection(pgbouncers, tmp_path):
    """PgBouncer in statement mode refuses every transaction (and closes the connection):
    mq says which pool mode will do, instead of "lost the connection"."""
    from tests.conftest import _pg_database, _pg_problem, cannot_run_here
    from tests.pooler import pgbouncer_unavailable

    reason = _pg_problem or pgbouncer_unavailable()
    if reason:
        cannot_run_here(reason)
    said = "PgBouncer in statement mode at postgresql://"
    what = "cannot run mq's transactions; use pool_mode = transaction or session"
    for direct in _pg_database(tmp_path):
        assert direct.run("init").exit_code == 0
        name = direct.url.rsplit("/", 1)[1]
        db = Db("postgres", pgbouncers["statement"].url(name), tmp_path)

        result = db.run("enqueue", "-q", "q", "1")
        assert result.exit_code == 3, result.output
        assert said in result.stderr and what in result.stderr, result.stderr
        assert "lost the connection" not in result.stderr
        # the error, then what the whole command stored (issue 50); no traceback
        assert result.stderr.splitlines()[1:] == ["mq: nothing was stored"], result.stderr

        assert direct.run("enqueue", "-q", "q", "1").exit_code == 0
        result = db.run("drain", "-q", "q", "--handler", "tests.handlers:ok")
        assert result.exit_code == 3, result.output
        assert what in result.stderr and "lost the connection" not in result.stderr

        stats = json.loads(direct.run("stats", "--json").stdout)["q"]
        assert (stats["ready"], stats["processing"]) == (1, 0), stats  # nothing taken

        lines = check_lines(db)
        assert lines["writable"].startswith("FAIL") and what in lines["writable"], lines


def test_check_on_a_direct_connection(pg_db):
    assert pg_db.run("init").exit_code == 0
    lines = check_lines(pg_db)
    assert lines["pooler"].startswith("ok none detected (pooler: auto)")
    assert lines["dead drains"] == "ok seen at once: each drain holds a session lock"


def test_commands_work_through_the_pooler(pooled_db):
    db = pooled_db
    # Past psycopg's prepare_threshold (5) many times over, on shared server sessions.
    for _ in range(3):
        result = db.run("enqueue", "-q", "q", "--lines", "--silent", input="{}\n" * 40)
        assert result.exit_code == 0, result.output
    result = db.run("pause", "-q", "q")
    assert result.exit_code == 0, result.output
    result = db.run("drain", "-q", "q", "--handler", "tests.handlers:ok", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["paused"] == ["q"]
    assert db.run("resume", "-q", "q").exit_code == 0
    result = db.run("drain", "-q", "q", "--handler", "tests.handlers:raises", "--max-messages", "1")
    assert result.exit_code == 0, result.output
    result = db.run("drain", "-q", "q", "--handler", "tests.handlers:ok", "--batch-size", "7")
    assert result.exit_code == 0, result.output
    stats = json.loads(db.run("stats", "--json").stdout)["q"]
    assert (stats["ready"] + stats["delayed"], stats["processing"]) == (1, 0)  # the failed one
    status = json.loads(db.run("status", "--json").stdout)
    assert status["queues"]["q"]["last_hour"]["done"] == 119
    assert db.run("gc", "--stalled", "--check").exit_code == 0
    listed = json.loads(db.run("list", "-q", "q", "--json").stdout)
    assert len(listed) == 1 and listed[0]["error_count"] == 1


def test_a_waiting_drain_polls_through_a_transaction_pooler_and_says_so(pgbouncers, tmp_path):
    from tests.conftest import pooled

    for db in pooled(pgbouncers, "transaction", tmp_path):
        drain = db.spawn(
            "-v", "drain", "-q", "q", "--handler", "tests.handlers:ok", "--wait",
            "--max-seconds", "120", "--json",
        )  # fmt: skip
        try:
            time.sleep(2)
            # Through mq_cli's own connection from another "host": no FIFO wake-up.
            db.sql(
                "INSERT INTO mq_messages (queue, payload, available_at, created_at) "
                "VALUES ('q', '\\x7b7d', now(), now())"
            )
            # It polls (at least once a second): the message runs long before the
            # drain's --max-seconds, which only a drain that stopped polling reaches.
            started = time.monotonic()
            while db.sql("SELECT COUNT(*) FROM mq_messages WHERE status <> 'done'") != [(0,)]:
                assert time.monotonic() - started < 60, "not run: did it stop polling?"
                time.sleep(0.05)
            drain.send_signal(signal.SIGTERM)
            out, err = drain.communicate(timeout=30)
        finally:
            drain.kill()
            drain.wait()
        assert drain.returncode == 0, err
        text = err.decode()
        assert json.loads(out)["succeeded"] == 1
        assert text.count("through a pooler in transaction mode: no LISTEN") == 1
        assert text.count("through a pooler in transaction mode: no session lock") == 1
        assert "Traceback" not in text and "prepared statement" not in text


def test_group_ack_claims_ahead_through_the_pooler(pooled_db, tmp_path):
    """The next claim sent while a batch runs (postgres/ahead.py) goes through a
    transaction pooler unprepared (prepare_threshold None), through a session pooler
    prepared: every message runs once either way."""
    db = pooled_db
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  q: {handler: 'tests.jobs:noop', group_ack: true, batch_size: 10}\n"
    )
    lines = "".join(json.dumps({"n": n}) + "\n" for n in range(150))
    assert db.run("enqueue", "-q", "q", "--lines", "--silent", input=lines).exit_code == 0
    result = db.run("-vv", "drain", "-q", "q", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["claimed"], report["succeeded"], report["lost"]) == (150, 150, 0)
    assert "message(s) ahead" in result.stderr, result.stderr
    stats = json.loads(db.run("stats", "--json").stdout)["q"]
    assert (stats["ready"], stats["processing"]) == (0, 0)
