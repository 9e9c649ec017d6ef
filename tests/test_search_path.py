"""PostgreSQL's search_path (issue 31, item 3): mq's table is found where the path
puts it, and nothing else mq runs is: no schema on the path can capture a function
or operator of mq's statements, and `mq init` refuses another application's table
of the same name before it creates anything beside it. MariaDB's counterpart last.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import mq_cli
from mq_cli.backends import open_backend
from mq_cli.backends.liveness import GRACE, SUSPECT
from mq_cli.backends.sqlfiles import load_queries
from mq_cli.core.dburl import parse_database_url
from tests import pg_capture
from tests.conftest import Db, _pg_connect


def set_search_path(db: Db, path: str) -> None:
    database = parse_database_url(db.url).database
    db.sql(f'ALTER DATABASE "{database}" SET search_path = {path}')


def tables(db: Db) -> list[str]:
    rows = db.sql(
        "SELECT schemaname || '.' || tablename FROM pg_tables "
        "WHERE schemaname IN ('app', 'public') ORDER BY 1"
    )
    return [str(row[0]) for row in rows]


def test_init_refuses_another_table_in_the_first_schema_and_creates_nothing(pg_db: Db):
    pg_db.sql("CREATE SCHEMA app")
    pg_db.sql("CREATE TABLE app.mq_messages (id BIGINT PRIMARY KEY, body TEXT)")
    set_search_path(pg_db, "app, public")
    result = pg_db.run("init")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("mq: table app.mq_messages is not mq's queue table")
    assert "no column queue, payload" in result.stderr and "changed nothing" in result.stderr
    assert tables(pg_db) == ["app.mq_messages"]
    check = pg_db.run("check")
    assert check.exit_code == 1 and "table app.mq_messages has no column queue" in check.stdout
    # mq's table is the one in the path's first schema: a schema of its own first, and
    # init makes it there, beside the other application's untouched.
    pg_db.sql("CREATE SCHEMA mq")
    set_search_path(pg_db, "mq, app, public")
    result = pg_db.run("init")
    assert result.exit_code == 0, result.output
    assert tables(pg_db) == ["app.mq_messages"]
    made = pg_db.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'mq' ORDER BY 1")
    assert ("mq_messages",) in made and ("mq_messages_meta",) in made


# -- every call pinned, read from the statements ---------------------------------


def test_every_function_and_cast_in_mqs_statements_names_pg_catalog():
    """postgres/postgres.sql's blocks and the dialect's Python statements: a function
    (or aggregate) called without pg_catalog, or a cast to a type neither a keyword
    nor pg_catalog's, fails here; the test below then covers any function added."""
    unpinned = []
    for name, sql in pg_capture.statements().items():
        unpinned += [f"{name}: {f}(...)" for f, pinned in pg_capture.calls(sql) if not pinned]
        unpinned += [f"{name}: ::{t}" for t, pinned in pg_capture.casts(sql) if not pinned]
    assert unpinned == []


def test_the_statement_reader_finds_calls_casts_and_operators():
    sql = (
        "SELECT now(), pg_catalog.max(id), x::int, y::pg_catalog.bytea, z::text, 'f(1)' "
        "FROM t AS b (c) WHERE c IN (%s, %s) AND d <= %(e)s || 'a<b' AND EXISTS (SELECT 1)"
    )
    assert list(pg_capture.calls(sql)) == [("now", False), ("max", True)]
    assert list(pg_capture.casts(sql)) == [("int", True), ("bytea", True), ("text", False)]
    assert pg_capture.operators(sql) == {"=", "<=", "||"}
    assert "postgres/topology.py" in " ".join(pg_capture.statements())  # Python statements too


# -- nothing captured, whatever runs ----------------------------------------------

CONFIG = """
queues:
  jobs: {handler: "tests.jobs:record", requeue_stalled: true, max_errors: 5,
         unique_retention: 1h}
  bad: {handler: "tests.jobs:fail_when_asked", max_errors: 2, retry_delay: 0}
  limited: {handler: "tests.jobs:record", rate_limit: 100/s, max_drains: 2, group_ack: true,
            batch_size: 5}
  slow: {handler: "tests.jobs:sleepy", requeue_stalled: true}
"""


class Runner:
    """``db.run`` that fails with what was captured so far, the likely cause."""

    def __init__(self, db: Db):
        self.db = db

    def __call__(self, *args: str, code: int = 0, **kwargs: Any) -> Any:
        result = self.db.run(*args, **kwargs)
        assert result.exit_code == code, (args, result.output, captured(self.db))
        return result


def captured(db: Db) -> list[str]:
    return sorted({str(row[0]) for row in db.sql("SELECT what FROM public.captured")})


def stalled_by_a_dead_drain(db: Db, queue: str, count: int = 1) -> list[int]:
    """Messages held by a drain (no session lock: judged by its heartbeat) that
    stopped two hours ago."""
    with open_backend(parse_database_url(db.url), "mq_messages") as backend:
        # Claimed in a queue of their own (not the queue's other ready messages).
        ids = [i for i in backend.enqueue("staging", [b'{"n": 0}'] * count) if i is not None]
        assert [m.id for m in backend.claim("staging", count, "deadhost:1:gone")] == ids
    for ident in ids:
        db.sql(
            "UPDATE mq_messages SET queue = %s, "
            "heartbeat_at = pg_catalog.now() - interval '2 hours' WHERE id = %s",
            (queue, ident),
        )
    return ids


def run_everything(db: Db, tmp: Path) -> None:
    """Every command, and the paths of a drain, that run SQL on PostgreSQL."""
    run = Runner(db)
    for _ in range(2):  # creates, then finds it ready (and checks its storage)
        run("init")
    run("enqueue", "-q", "jobs", '{"n": 1}', '{"n": 2}', '{"n": 3}')
    run("enqueue", "-q", "jobs", "--delay", "1s", '{"n": 4}')
    run("enqueue", "-q", "jobs", "--priority", "3", "--unique-key", "k1", '{"n": 5}')
    run("enqueue", "-q", "jobs", "--unique-key", "k1", '{"n": 6}')  # skipped
    lines = "".join(f'{{"n": {i}}}\n' for i in range(20))
    run("enqueue", "-q", "limited", "--lines", input=lines)
    with _pg_connect(db.url, autocommit=False) as conn:  # an application's transaction
        assert mq_cli.enqueue("jobs", {"n": 7}, connection=conn) is not None
        conn.commit()
    for args in (
        ("stats",),
        ("stats", "--json"),
        ("stats", "--prometheus", str(tmp / "mq.prom")),
        ("list", "-q", "jobs", "--json"),
        ("list", "--status", "delayed"),
        ("show", "1", "--json"),
        ("pause", "-q", "jobs"),
        ("drain", "-q", "jobs"),
        ("resume", "-q", "jobs"),
        ("drain", "-q", "jobs", "--max-messages", "2"),
    ):
        run(*args)
    threading.Event().wait(1.1)  # the delayed message is due: promoted, then claimed
    run("drain", "-q", "jobs")
    # Fleet limits: session locks direct; slot rows where a pooler takes them away.
    run("drain", "-q", "limited", "--max-messages", "10")
    run("drain", "-q", "limited", env={"MQ_DATABASE_URL": db.url + "?pooler=transaction"})
    # Failures, failed messages and what operators do with them.
    run("enqueue", "-q", "bad", '{"fail": true, "n": 1}', '{"fail": true, "n": 2}')
    for _ in range(2):
        run("drain", "-q", "bad")
    for args in (("gc", "--errors"), ("gc", "--errors", "--json"), ("list", "--status", "failed")):
        run(*args)
    run("gc", "--errors", "--check", code=1)
    failed = [m["id"] for m in json.loads(db.run("gc", "--errors", "--json").stdout)]
    run("retry", str(failed[0]))
    run("delete", str(failed[1]))
    run("drain", "-q", "bad")
    run("gc", "--errors", "--requeue")
    run("drain", "-q", "bad")
    run("gc", "--errors", "--delete")
    # Stalled messages: listed, requeued, deleted, and taken back by a drain.
    stalled_by_a_dead_drain(db, "jobs", 2)
    for args in (("gc", "--stalled"), ("list", "--status", "stalled"), ("status", "--json")):
        run(*args)
    run("gc", "--stalled", "--check", code=1)
    run("gc", "--stalled", "--requeue")
    stalled_by_a_dead_drain(db, "jobs")
    run("gc", "--stalled", "--delete", "--older-than", "1h")
    stalled_by_a_dead_drain(db, "jobs")
    assert "requeued 1 stalled" in run("drain", "-q", "jobs").stderr  # requeue_stalled
    # A drain killed while its handler runs: its session lock is free at once, long
    # before stalled_after (1h).
    run("enqueue", "-q", "slow", '{"sleep": 60}')
    drain = db.spawn("drain", "-q", "slow")
    try:
        deadline = time.monotonic() + 30
        while not db.sql("SELECT 1 FROM mq_messages WHERE queue = 'slow' AND owner IS NOT NULL"):
            assert time.monotonic() < deadline, "the drain never claimed"
            threading.Event().wait(0.05)
    finally:
        drain.send_signal(signal.SIGKILL)
        drain.communicate(timeout=30)
    (tmp / "mq.yaml").write_text(CONFIG.replace("tests.jobs:sleepy", "tests.jobs:record"))
    # Its lock free for SUSPECT seconds, it is dead: requeued, due GRACE later, run.
    taken = run("drain", "-q", "slow", "--wait", "--max-seconds", str(SUSPECT + GRACE + 2))
    assert "requeued 1 stalled" in taken.stderr
    for args in (
        ("status",),
        ("status", "--html", str(tmp / "status.html")),
        ("check",),
        ("purge", "-q", "limited", "--yes"),
        ("list", "-q", "jobs"),
    ):
        run(*args)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param('"$user", public', id="default"),
        pytest.param("public, pg_catalog", id="public-first"),
    ],
)
def test_no_schema_on_the_search_path_captures_a_call(pg_db: Db, tmp_path: Path, monkeypatch, path):
    """public filled with look-alikes of every function, aggregate, operator, type and
    collation mq's statements use (tests/pg_capture.py), each recording its call; then
    every command runs. With PostgreSQL's default path (pg_catalog searched first) a
    look-alike wins only where it matches better, as make_interval(secs numeric) did;
    with public first, wherever a name is not pinned. None may ever run."""
    with _pg_connect(pg_db.url) as conn:
        assert pg_capture.install(conn) > 1000
    set_search_path(pg_db, path)
    monkeypatch.setenv("MQ_TEST_LOG", str(tmp_path / "ran.jsonl"))
    (tmp_path / "mq.yaml").write_text(CONFIG)
    run_everything(pg_db, tmp_path)
    found = captured(pg_db)
    assert not found, f"ran instead of pg_catalog's: {found}"
    foreign = pg_db.sql(
        "SELECT c.relname || '.' || a.attname FROM pg_catalog.pg_attribute a "
        "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
        "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
        "LEFT JOIN pg_catalog.pg_collation l ON l.oid = a.attcollation "
        "WHERE c.relnamespace = 'public'::pg_catalog.regnamespace::pg_catalog.oid "
        "  AND c.relname LIKE 'mq\\_messages%%' AND a.attnum > 0 "
        "  AND (t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace::pg_catalog.oid "
        "       OR l.collnamespace <> 'pg_catalog'::pg_catalog.regnamespace::pg_catalog.oid)"
    )
    assert foreign == []  # every column's type and collation is the catalog's


# -- MariaDB: nothing to pin ---------------------------------------------------------


def test_mariadb_runs_its_own_functions_whatever_the_database_holds(mysql_db: Db, tmp_path):
    """MariaDB resolves a native function's name before any stored function (one of
    the same name is made, with a note, and runs only when called as db.name()),
    and has no user-defined operators: mysql/mysql.sql needs no qualifying. A stored
    function named after each function it calls stays uncalled."""
    import pymysql

    names = set(re.findall(r"\b([A-Z_][A-Z0-9_]*)\(", "\n".join(load_queries("mysql").values())))
    s = parse_database_url(mysql_db.url)
    conn = pymysql.connect(
        host=s.host, port=s.port, user=s.user or "root", password=s.password or "",
        database=s.database, autocommit=True, ssl_disabled=True,
    )  # fmt: skip
    made = []
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE captured (what VARCHAR(64) NOT NULL)")
        for name in sorted(names - {"VARCHAR", "VARBINARY", "DATETIME", "DECIMAL"}):
            try:
                record = f"INSERT INTO captured VALUES ('{name}')"  # noqa: S608
                cursor.execute(
                    f"CREATE FUNCTION `{name}`() RETURNS INT BEGIN {record}; RETURN 0; END"
                )
                made.append(name)
            except pymysql.MySQLError:
                pass  # a name the grammar keeps for itself (COUNT, SUM): none can be made
    conn.close()
    assert {"UTC_TIMESTAMP", "TIMESTAMPADD", "GET_LOCK", "CONCAT", "SHA1"} <= set(made)
    log_env = {"MQ_TEST_LOG": str(tmp_path / "ran.jsonl")}
    for args in (
        ("init",), ("enqueue", "-q", "q", "--delay", "1s", "1"), ("enqueue", "-q", "q", "2"),
        ("drain", "-q", "q", "--handler", "tests.jobs:record"), ("stats", "--json"),
        ("gc", "--stalled"), ("status", "--json"), ("check",),
    ):  # fmt: skip
        result = mysql_db.run(*args, env=log_env)
        assert result.exit_code == 0, (args, result.output)
    assert mysql_db.sql("SELECT what FROM captured") == []
