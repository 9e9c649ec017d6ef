"""`mq check` names what holds PostgreSQL's vacuum horizon: a long transaction in
another database, a prepared transaction and a replication slot, each with its age
and what to do. On a private server (max_prepared_transactions > 0 and
wal_level = logical need a restart, which the shared server must not get)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import mq_cli.backends.postgres as pg
from tests import servers
from tests.conftest import Db, cannot_run_here


@pytest.fixture(scope="module")
def server() -> Iterator[servers.PrivatePostgres]:
    reason = servers.pg_unavailable()
    if reason:
        cannot_run_here(f"cannot start a private PostgreSQL: {reason}")
    server = servers.PrivatePostgres()
    try:
        server.sql("ALTER SYSTEM SET max_prepared_transactions = 5")
        server.sql("ALTER SYSTEM SET wal_level = logical")
        server.stop()
        server.start()
        server.sql("CREATE DATABASE mq_horizon")
        yield server
    finally:
        server.close()


def connect(server: servers.PrivatePostgres, database: str, autocommit: bool = True):
    import psycopg

    return psycopg.connect(server.url(database), autocommit=autocommit, sslmode="disable")


def test_check_names_what_holds_the_vacuum_horizon(server, tmp_path: Path, monkeypatch):
    db = Db("postgres", server.url("mq_horizon"), tmp_path)
    assert db.run("init").exit_code == 0
    result = db.run("check")
    for name, text in (
        ("transactions", "none open for long"),
        ("prepared transactions", "none"),
        ("replication slots", "none holds old rows"),
    ):
        assert re.search(rf"ok\s+{name}\s+{text}", result.stdout), result.stdout

    # The slot first: making one waits for every transaction open meanwhile to end.
    with connect(server, "postgres") as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('mq_test_slot', 'pgoutput')")
    with connect(server, "mq_horizon") as conn:
        conn.execute("CREATE TABLE app (x int)")
    prepared = connect(server, "mq_horizon", autocommit=False)
    prepared.execute("INSERT INTO app VALUES (1)")
    prepared.execute("PREPARE TRANSACTION 'mq-test-gid'")
    prepared.close()  # a prepared transaction outlives its session
    other = connect(server, "postgres", autocommit=False)  # another database
    try:
        other.execute("SELECT txid_current()")  # holds an xid, then idles in its transaction
        monkeypatch.setattr(pg, "LONG_TRANSACTION", 0.2)
        threading.Event().wait(0.5)
        result = db.run("check")
    finally:
        other.rollback()
        other.close()
    out = result.stdout
    assert result.exit_code == 1, result.output
    assert re.search(r"FAIL\s+transactions\s+a transaction has been open for \d+ s", out), out
    assert "idle in transaction, database postgres" in out and "pg_terminate_backend" in out
    assert re.search(r"FAIL\s+prepared transactions\s+'mq-test-gid' \(database mq_horizon", out)
    assert "ROLLBACK PREPARED 'mq-test-gid'" in out
    assert re.search(r"FAIL\s+replication slots\s+'mq_test_slot' \(logical, inactive", out), out
    assert "pg_drop_replication_slot('mq_test_slot')" in out

    with connect(server, "mq_horizon") as conn:
        conn.execute("ROLLBACK PREPARED 'mq-test-gid'")
    with connect(server, "postgres") as conn:
        conn.execute("SELECT pg_drop_replication_slot('mq_test_slot')")
    result = db.run("check")
    assert result.exit_code == 0, result.output
    assert re.search(r"ok\s+prepared transactions\s+none", result.stdout)
    assert re.search(r"ok\s+replication slots\s+none holds old rows", result.stdout)
