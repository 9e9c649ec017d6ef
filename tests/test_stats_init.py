"""`mq init` and `mq stats`: idempotent schema, DDL without side effects, the zero-config
default, a missing schema, and the exact shape of `stats --json`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from mq_cli.cli.main import cli

STATS_KEYS = {
    "ready", "delayed", "processing", "stalled", "failed", "oldest_ready_seconds", "paused",
}  # fmt: skip
ZERO = {"ready": 0, "delayed": 0, "processing": 0, "stalled": 0, "failed": 0,
        "oldest_ready_seconds": None, "paused": False}  # fmt: skip


def mq(*args: str, input: str | bytes | None = None, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


def stats_json(db, *args: str, env: dict | None = None) -> dict:
    result = db.run("stats", "--json", *args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def enqueue(db, queue: str, *args: str) -> int:
    result = db.run("enqueue", "-q", queue, *args)
    assert result.exit_code == 0, result.output
    return int(result.stdout)


def now_sql(db, seconds: int = 0) -> str:
    """SQL for the database's UTC now, moved by ``seconds``, in the column's format."""
    return db.now_sql(seconds)


# -- init ---------------------------------------------------------------------


def test_init_is_idempotent_and_keeps_messages(db):
    new_id = enqueue(db, "q", '{"keep": 1}')
    for _ in range(2):
        result = db.run("init")
        assert result.exit_code == 0, result.output
        assert "schema ready" in result.stdout
        assert "mq_messages" in result.stdout
    assert db.sql("SELECT id, payload FROM mq_messages") == [(new_id, b'{"keep": 1}')]


def test_print_sql_touches_no_sqlite_file(sqlite_db, tmp_path: Path):
    result = sqlite_db.run("init", "--print-sql")
    assert result.exit_code == 0, result.output
    assert 'CREATE TABLE IF NOT EXISTS "mq_messages"' in result.stdout
    assert "CREATE UNIQUE INDEX" in result.stdout
    assert not (tmp_path / "mq.db").exists()
    assert not (tmp_path / "xdg-data").exists()


def test_print_sql_touches_no_mysql_table(mysql_db):
    result = mysql_db.run("init", "--print-sql")
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE IF NOT EXISTS `mq_messages`" in result.stdout
    assert "ENGINE=InnoDB" in result.stdout
    assert mysql_db.sql("SHOW TABLES") == []


def test_print_sql_needs_no_reachable_server():
    result = mq("-d", "mysql://root:s3cret@127.0.0.1:1/app", "init", "--print-sql")
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE" in result.stdout
    assert "s3cret" not in result.output


def test_print_sql_uses_the_configured_table(tmp_path: Path):
    (tmp_path / "mq.yaml").write_text("table: jobs\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 0
    assert 'CREATE TABLE IF NOT EXISTS "jobs"' in result.stdout
    assert "mq_messages" not in result.stdout


def test_print_sql_is_runnable(tmp_path: Path):
    """What --print-sql prints is what a DBA would feed to the database by hand."""
    result = mq("-d", f"sqlite:///{tmp_path}/by-hand.db", "init", "--print-sql")
    conn = sqlite3.connect(tmp_path / "by-hand.db")
    conn.executescript(result.stdout)
    conn.close()
    result = mq("-d", f"sqlite:///{tmp_path}/by-hand.db", "enqueue", "-q", "q", "{}")
    assert result.exit_code == 0, result.output


def test_zero_config_default_creates_the_database_on_first_enqueue(tmp_path: Path):
    default = tmp_path / "xdg-data" / "mq" / "mq.db"
    assert not default.exists()
    result = mq("enqueue", "-q", "first", '{"hello": "world"}')
    assert result.exit_code == 0, result.output
    new_id = int(result.stdout)
    assert default.exists()
    conn = sqlite3.connect(default)
    try:
        rows = conn.execute("SELECT id, queue, payload FROM mq_messages").fetchall()
    finally:
        conn.close()
    assert rows == [(new_id, "first", b'{"hello": "world"}')]
    result = mq("stats", "--json")
    assert json.loads(result.stdout)["first"]["ready"] == 1


def test_zero_config_without_xdg_data_home(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    result = mq("enqueue", "-q", "first", "{}")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / ".local" / "share" / "mq" / "mq.db").exists()


@pytest.mark.parametrize(
    "args",
    [["enqueue", "-q", "q", "{}"], ["stats"], ["stats", "--json"], ["stats", "-q", "q"]],
)
def test_missing_schema_on_mariadb_says_run_mq_init(mysql_db, args: list[str]):
    result = mysql_db.run(*args)
    assert result.exit_code == 3, result.output
    assert "mq init" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert mysql_db.sql("SHOW TABLES") == []  # mq did not create it behind the user's back


# -- stats --------------------------------------------------------------------


@pytest.mark.parametrize("content", ["empty", "another program's database"])
def test_readers_never_make_an_existing_sqlite_file_a_queue(sqlite_db, content):
    path = sqlite_db.tmp / "mq.db"
    if content == "empty":
        path.touch()
    else:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE theirs (x)")
        conn.close()
    before = path.read_bytes()
    for args in (["stats"], ["stats", "--json"], ["list", "-q", "q"], ["show", "1"],
                 ["gc", "--errors"], ["gc", "--stalled", "--check"]):  # fmt: skip
        result = sqlite_db.run(*args)
        assert result.exit_code == 3, (args, result.output)
        assert "has no mq schema" in result.stderr and "mq init" in result.stderr
        assert "Traceback" not in result.output
    assert path.read_bytes() == before  # not even switched to WAL
    assert not Path(f"{path}-wal").exists()
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("stats", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == {}


def test_stats_json_shape(db):
    enqueue(db, "a", "[1]")
    enqueue(db, "a", "[2]")
    enqueue(db, "a", "--delay", "1h", "[3]")
    enqueue(db, "b", "--delay", "10m", "[4]")
    data = stats_json(db)
    assert list(data) == ["a", "b"]
    for counts in data.values():
        assert set(counts) == STATS_KEYS
    oldest = data["a"].pop("oldest_ready_seconds")
    assert isinstance(oldest, float) and 0 <= oldest < 60
    assert data["a"] == {
        "ready": 2, "delayed": 1, "processing": 0, "stalled": 0, "failed": 0, "paused": False,
    }  # fmt: skip
    assert data["b"] == {**ZERO, "delayed": 1}


def test_stats_json_of_nothing_is_an_empty_object(db):
    result = db.run("stats", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {}


def test_stats_splits_the_queue_without_overlap(db):
    ids = [enqueue(db, "q", f"[{n}]") for n in range(6)]
    # What drains would leave behind: a live claim, a stalled one, a failed message.
    db.sql(
        f"UPDATE mq_messages SET status = 'processing', owner = 'h:1', heartbeat_at = {now_sql(db)} "  # noqa: S608
        "WHERE id = %s",
        (ids[0],),
    )
    db.sql(
        f"UPDATE mq_messages SET status = 'processing', owner = 'h:2', "  # noqa: S608
        f"heartbeat_at = {now_sql(db, -7200)} WHERE id = %s",
        (ids[1],),
    )
    db.sql("UPDATE mq_messages SET status = 'failed', error_count = 10 WHERE id = %s", (ids[2],))
    db.sql(
        f"UPDATE mq_messages SET available_at = {now_sql(db, 600)} WHERE id = %s",  # noqa: S608
        (ids[3],),
    )
    counts = stats_json(db)["q"]
    counts.pop("oldest_ready_seconds")
    assert counts == {
        "ready": 2, "delayed": 1, "processing": 1, "stalled": 1, "failed": 1, "paused": False,
    }  # fmt: skip


def test_oldest_ready_counts_from_when_it_became_available(db):
    new_id = enqueue(db, "q", "{}")
    db.sql(
        f"UPDATE mq_messages SET created_at = {now_sql(db, -3600)}, "  # noqa: S608
        f"available_at = {now_sql(db, -100)} WHERE id = %s",
        (new_id,),
    )
    oldest = stats_json(db)["q"]["oldest_ready_seconds"]
    assert 99 <= oldest <= 130


def test_oldest_ready_is_null_when_nothing_is_ready(db):
    new_id = enqueue(db, "q", "{}")
    db.sql("UPDATE mq_messages SET status = 'failed' WHERE id = %s", (new_id,))
    assert stats_json(db)["q"] == {**ZERO, "failed": 1}


def test_configured_queues_without_messages_show_zeros(db):
    path = db.tmp / "queues.yaml"
    path.write_text("queues:\n  idle:\n    handler: x:y\n  busy:\n    handler: x:y\n")
    env = {"MQ_CONFIG": str(path)}
    enqueue(db, "busy", "{}")
    enqueue(db, "adhoc", "{}")  # not configured, but holds messages
    data = stats_json(db, env=env)
    assert set(data) == {"idle", "busy", "adhoc"}
    assert data["idle"] == ZERO
    assert data["busy"]["ready"] == 1 and data["adhoc"]["ready"] == 1

    result = db.run("stats", env=env)
    assert result.exit_code == 0
    idle = next(line for line in result.stdout.splitlines() if line.startswith("idle"))
    assert idle.split() == ["idle", "0", "0", "0", "0", "0", "-"]


def test_stats_queue_filter(db):
    enqueue(db, "a", "{}")
    enqueue(db, "b", "{}")
    assert list(stats_json(db, "-q", "a")) == ["a"]
    assert stats_json(db, "--queue", "b")["b"]["ready"] == 1
    unknown = db.run("stats", "-q", "never-used", "--json")  # a typo is not an empty queue
    assert unknown.exit_code == 2 and "queue 'never-used' is unknown" in unknown.stderr
    result = db.run("stats", "-q", "bad name")
    assert result.exit_code == 2
    assert "invalid queue name" in result.stderr


def test_stats_table(db):
    enqueue(db, "thumbnails", "{}")
    enqueue(db, "thumbnails", "{}")
    enqueue(db, "mail", "--delay", "1h", "{}")
    result = db.run("stats")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["QUEUE", "READY", "DELAYED", "PROCESSING", "STALLED", "FAILED",
                              "OLDEST", "READY"]  # fmt: skip
    table = {row.split()[0]: row.split()[1:] for row in rows}
    assert table["mail"] == ["0", "1", "0", "0", "0", "-"]
    assert table["thumbnails"][:5] == ["2", "0", "0", "0", "0"]
    assert table["thumbnails"][5].endswith("s")  # an age such as 0.4s


def test_stats_table_when_nothing_exists(db):
    result = db.run("stats")
    assert result.exit_code == 0
    assert "no queues" in result.stdout
