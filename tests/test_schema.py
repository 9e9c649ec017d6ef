"""The schema version and the table's shape are enforced, and `mq init` migrates and repairs.

Each test damages a real table the way an upgrade, a rollback or a hand-run
ALTER would, then drives the CLI: enqueue and drain refuse before touching a
message, `mq check` reports it, `mq init` repairs it and says what it did.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mq_cli.backends import open_backend
from mq_cli.backends.schema import verify
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.version import SCHEMA_VERSION


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def set_version(db, value: str) -> None:
    db.sql("UPDATE mq_messages_meta SET value = %s WHERE name = 'schema_version'", (value,))


def statuses(db) -> list[tuple]:
    return db.sql("SELECT id, status FROM mq_messages ORDER BY id")


def enqueue(db, *args: str):
    return db.run("enqueue", "-q", "jobs", *args)


def drain(db):
    return db.run("drain", "-q", "jobs", "--handler", "tests.jobs:record")


def drop_index(db, name: str) -> None:
    if db.kind == "mysql":
        db.sql(f"ALTER TABLE mq_messages DROP INDEX `{name}`")
    else:
        db.sql(f'DROP INDEX "{name}"')


# -- the version ----------------------------------------------------------------


def test_an_older_sqlite_file_is_migrated_on_first_use(sqlite_db, ran):
    # The embedded default needs no `mq init`, so no `mq init` after an upgrade either.
    assert enqueue(sqlite_db, "1").exit_code == 0
    set_version(sqlite_db, "0")
    result = enqueue(sqlite_db, "2")
    assert result.exit_code == 0, result.output
    assert sqlite_db.sql("SELECT value FROM mq_messages_meta WHERE name = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    assert drain(sqlite_db).exit_code == 0
    assert [r["payload"] for r in ran()] == [1, 2]


def test_an_older_version_is_refused_until_init_migrates_it(mysql_db, ran):
    db = mysql_db
    assert db.run("init").exit_code == 0
    assert enqueue(db, "1").exit_code == 0
    set_version(db, "0")
    for result in (enqueue(db, "2"), drain(db)):
        assert result.exit_code == 3, result.output
        assert (
            f"schema version 0 is older than this mq ({SCHEMA_VERSION}): run `mq init`"
            in result.stderr
        )
        assert "Traceback" not in result.output
    assert statuses(db) == [(1, "ready")]  # nothing stored, nothing claimed
    assert ran() == []

    check = db.run("check")
    assert check.exit_code == 1
    assert "FAIL  schema" in check.stdout and "version 0" in check.stdout

    result = db.run("init")
    assert result.exit_code == 0, result.output
    assert "migrated 0 -> 1" in result.stdout
    assert "schema ready" in result.stdout
    assert db.sql("SELECT value FROM mq_messages_meta WHERE name = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    assert drain(db).exit_code == 0
    assert [r["payload"] for r in ran()] == [1]


def test_a_newer_version_is_refused_and_init_does_not_downgrade_it(db, ran):
    assert enqueue(db, "1").exit_code == 0
    newer = SCHEMA_VERSION + 1
    set_version(db, str(newer))
    for result in (enqueue(db, "2"), drain(db), db.run("init")):
        assert result.exit_code == 3, result.output
        assert (
            f"schema version {newer} is newer than this mq ({SCHEMA_VERSION}): upgrade mq"
            in result.stderr
        )
    assert statuses(db) == [(1, "ready")]
    assert ran() == []
    assert db.sql("SELECT value FROM mq_messages_meta") == [(str(newer),)]
    check = db.run("check")
    assert check.exit_code == 1
    assert "upgrade mq" in check.stdout


def test_a_missing_version_row_is_version_0(db):
    db.sql("DELETE FROM mq_messages_meta")
    if db.kind != "sqlite":  # SQLite records it on open (its zero-setup default)
        result = enqueue(db, "1")
        assert result.exit_code == 3
        assert "schema version 0" in result.stderr
    result = db.run("init")
    assert result.exit_code == 0, result.output
    assert db.sql("SELECT value FROM mq_messages_meta") == [(str(SCHEMA_VERSION),)]
    assert enqueue(db, "1").exit_code == 0


def test_init_on_a_current_schema_says_nothing_but_ready(db):
    result = db.run("init")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [result.stdout.splitlines()[-1]]
    assert result.stdout.startswith("schema ready")


# -- the shape --------------------------------------------------------------------


def test_a_lost_unique_index_is_refused_then_restored_by_init(db):
    drop_index(db, "mq_messages_unique")
    for _ in range(3):
        result = enqueue(db, "1", "--unique-key", "k")
        assert result.exit_code == 3, result.output
        assert "no index mq_messages_unique" in result.stderr
        assert "mq init" in result.stderr
    assert statuses(db) == []  # the key was never stored three times

    check = db.run("check")
    assert check.exit_code == 1
    assert "no index mq_messages_unique" in check.stdout

    result = db.run("init")
    assert result.exit_code == 0, result.output
    assert "restored index mq_messages_unique" in result.stdout
    ids = [enqueue(db, "1", "--unique-key", "k").stdout.strip() for _ in range(3)]
    assert len(statuses(db)) == 1, ids
    assert db.run("check").exit_code == 0


def test_a_lost_claim_index_is_refused_then_restored_by_init(db, ran):
    assert enqueue(db, "1").exit_code == 0
    drop_index(db, "mq_messages_claim")
    result = drain(db)
    assert result.exit_code == 3
    assert "no index mq_messages_claim" in result.stderr
    assert ran() == []
    result = db.run("init")
    assert "restored index mq_messages_claim" in result.stdout
    assert drain(db).exit_code == 0
    assert [r["payload"] for r in ran()] == [1]


def test_a_lost_column_stops_a_drain_before_it_claims(db, ran):
    # Before: the drain claimed, ran the handler, then failed to record the
    # result (exit 3) and left the message processing for good.
    assert enqueue(db, "1").exit_code == 0
    db.sql("ALTER TABLE mq_messages DROP COLUMN last_error")
    result = drain(db)
    assert result.exit_code == 3, result.output
    assert "no column last_error" in result.stderr and "mq init" in result.stderr
    assert ran() == []
    assert statuses(db) == [(1, "ready")]

    result = db.run("init")
    assert result.exit_code == 0, result.output
    assert "restored column last_error" in result.stdout
    assert drain(db).exit_code == 0
    assert [r["payload"] for r in ran()] == [1]
    assert statuses(db) == []


def test_a_lost_payload_column_cannot_be_made_up(db):
    db.sql("ALTER TABLE mq_messages DROP COLUMN payload")
    result = db.run("init")
    assert result.exit_code == 3
    assert "payload" in result.stderr and "backup" in result.stderr
    check = db.run("check")
    assert check.exit_code == 1 and "no column payload" in check.stdout


def user_tables(db) -> list[str]:
    if db.kind == "sqlite":
        statement = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    elif db.kind == "mysql":
        statement = (
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "ORDER BY TABLE_NAME"
        )
    else:
        statement = (
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
        )
    return [str(row[0]) for row in db.sql(statement)]


def test_init_refuses_another_applications_table_before_creating_anything(fresh_db):
    """A table of the configured name that holds no messages (no queue, no payload):
    refused, named with its schema or database, and nothing made beside it."""
    fresh_db.sql("CREATE TABLE mq_messages (id INTEGER PRIMARY KEY, name TEXT)")
    before = user_tables(fresh_db)
    result = fresh_db.run("init")
    assert result.exit_code == 3, result.output
    database = parse_database_url(fresh_db.url).database
    named = {"sqlite": "mq_messages", "mysql": f"{database}.mq_messages",
             "postgres": "public.mq_messages"}[fresh_db.kind]  # fmt: skip
    assert f"mq: table {named} is not mq's queue table" in result.stderr
    assert "no column queue, payload" in result.stderr and "changed nothing" in result.stderr
    assert user_tables(fresh_db) == before
    check = fresh_db.run("check")
    assert check.exit_code == 1 and f"table {named} has no column queue" in check.stdout
    assert user_tables(fresh_db) == before


def test_a_table_without_its_meta_table_is_version_0_and_migrated(db):
    """The oldest layout: no _meta table at all. Reading the version fails inside
    `mq init`'s one transaction (PostgreSQL, SQLite) without aborting it."""
    assert db.run("enqueue", "-q", "jobs", "1").exit_code == 0
    for table in ("mq_messages_meta", "mq_messages_runs", "mq_messages_rollup"):
        db.sql(f"DROP TABLE {table}")
    if db.kind != "sqlite":  # SQLite migrates itself on first use
        assert "schema version 0" in db.run("stats").stderr
    result = db.run("init")
    assert result.exit_code == 0, result.output
    if db.kind != "sqlite":
        assert "migrated 0 -> 1" in result.stdout and "migrated 2 -> 3" in result.stdout
    assert db.sql("SELECT value FROM mq_messages_meta WHERE name = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    assert len(db.sql("SELECT id FROM mq_messages")) == 1


def test_version_0_mariadb_text_unique_key_becomes_bytes(mysql_db):
    """The only layout change in history: unique_key was utf8mb4 text before version 1."""
    assert mysql_db.run("init").exit_code == 0
    mysql_db.sql(
        "ALTER TABLE mq_messages MODIFY unique_key "
        "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
    )
    mysql_db.sql("DELETE FROM mq_messages_meta")
    result = mysql_db.run("init")
    assert result.exit_code == 0, result.output
    assert "unique_key stored as bytes" in result.stdout
    kind = mysql_db.sql(
        "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'mq_messages' AND COLUMN_NAME = 'unique_key'"
    )
    assert kind == [("varbinary",)]
    for key in ("k", "k "):  # distinct keys as bytes; the old collation padded them equal
        assert mysql_db.run("enqueue", "-q", "q", "1", "--unique-key", key).exit_code == 0
    assert len(mysql_db.sql("SELECT id FROM mq_messages")) == 2


def test_the_check_is_once_per_connection_and_cheap(db):
    """What every command pays for the check (a version read and two catalogue reads)."""
    settings = parse_database_url(db.url)
    with open_backend(settings, "mq_messages") as backend:
        verify(backend)  # warm
        started = time.perf_counter()
        for _ in range(20):
            verify(backend)
        each = (time.perf_counter() - started) / 20
    print(f"\nFIGURES {db.kind}: schema check {each * 1000:.2f} ms per connection")
    # A few ms on a quiet machine (a figure: bench's coldstart pays it once per
    # command); the bound only catches a check that scans or waits on a lock.
    assert each < 0.5


def test_version_3_delayed_messages_get_their_status_and_index(db, ran):
    """Schema 4 stores messages not due yet as 'delayed' beside an index of their own;
    `mq init` migrates a version 3 table keeping every row and what users see."""
    assert enqueue(db, "1").exit_code == 0
    assert enqueue(db, "--delay", "1h", "2").exit_code == 0
    # Not due until the test says so (below): a loaded machine may take seconds here.
    assert enqueue(db, "--delay", "10m", "3").exit_code == 0
    # A version 3 table: no due index, every waiting message stored 'ready'.
    drop_index(db, "mq_messages_due")
    db.sql("UPDATE mq_messages SET status = 'ready' WHERE status = 'delayed'")
    set_version(db, "3")
    if db.kind != "sqlite":  # SQLite migrates itself on first use
        refused = db.run("stats")
        assert refused.exit_code == 3 and "run `mq init`" in refused.stderr
        result = db.run("init")
        assert result.exit_code == 0, result.output
        assert "migrated 3 -> 4" in result.stdout and "restored index mq_messages_due" in (
            result.stdout
        )
    counts = json.loads(db.run("stats", "--json").stdout)["jobs"]
    assert (counts["ready"], counts["delayed"]) == (1, 2)
    assert [s for _, s in statuses(db)] == ["ready", "delayed", "delayed"]
    listed = json.loads(db.run("list", "-q", "jobs", "--json").stdout)
    assert [m["status"] for m in listed] == ["ready", "ready", "ready"]
    # Message 3 due now, still stored 'delayed' until a drain promotes it.
    due_now = f"UPDATE mq_messages SET available_at = {db.now_sql()} WHERE id = %s"  # noqa: S608
    db.sql(due_now, (statuses(db)[2][0],))
    assert drain(db).exit_code == 0
    assert [r["payload"] for r in ran()] == [1, 3]
    assert [s for _, s in statuses(db)] == ["delayed"]
