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

import mq_cli.backends.postgres.dialect as pg
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


def _standby_xid_age(server: servers.PrivatePostgres) -> int | None:
    with connect(server, "postgres") as conn:
        row = conn.execute("SELECT max(age(backend_xmin)) FROM pg_stat_replication").fetchone()
    return None if row is None or row[0] is None else int(row[0])


@pytest.mark.serial
def test_a_standby_a_slot_and_a_prepared_transaction_in_check_and_status(
    server, tmp_path: Path, monkeypatch
):
    """The issue's done-when: a long transaction on a standby (through
    hot_standby_feedback), an unused slot and a prepared transaction, each named by
    `mq check` and carried by `mq status --json`."""
    import json

    import psycopg

    from mq_cli.backends.postgres import horizon as pg_horizon

    # Copied into the standby by pg_basebackup (postgresql.auto.conf); a primary ignores
    # both. Feedback every second, so that the standby's xmin follows its queries.
    server.sql("ALTER SYSTEM SET hot_standby_feedback = on")
    server.sql("ALTER SYSTEM SET wal_receiver_status_interval = 1")
    standby = servers.PrivateStandby(server)
    db = Db("postgres", server.url("mq_horizon"), tmp_path)
    held = None
    try:
        assert db.run("init").exit_code == 0
        with connect(server, "postgres") as conn:  # unused, so distinct from the standby
            conn.execute("SELECT pg_create_logical_replication_slot('mq_unused', 'pgoutput')")
        with connect(server, "mq_horizon") as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS app (x int)")
        # The standby's snapshot first, so that it is older than the prepared
        # transaction (which runs on the standby too, and holds its xmin as well).
        held = connect(standby, "mq_horizon", autocommit=False)
        held.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        held.execute("SELECT 1")  # a snapshot held on the standby
        prepared = connect(server, "mq_horizon", autocommit=False)
        prepared.execute("INSERT INTO app VALUES (1)")
        prepared.execute("PREPARE TRANSACTION 'mq-standby-gid'")
        prepared.close()
        threading.Event().wait(2.5)  # two feedback rounds: the standby reports it
        with connect(server, "postgres") as conn:
            for _ in range(10):
                conn.execute("SELECT txid_current()")  # each its own transaction
        threading.Event().wait(2.5)  # the held snapshot keeps the old xmin meanwhile
        assert (_standby_xid_age(server) or 0) >= 10
        monkeypatch.setattr(pg_horizon, "HORIZON_XIDS", 5)
        monkeypatch.setattr(pg, "LONG_TRANSACTION", 0.2)  # the prepared one is seconds old
        result = db.run("check")
        out = result.stdout
        assert result.exit_code == 1, result.output
        assert re.search(
            r"FAIL\s+standbys\s+standby \S+ \(127\.0\.0\.1\) holds rows \d+ transactions back "
            r"through hot_standby_feedback", out
        ), out  # fmt: skip
        assert "turn hot_standby_feedback off" in out
        assert re.search(r"FAIL\s+prepared transactions\s+'mq-standby-gid'", out), out
        assert re.search(r"FAIL\s+replication slots\s+'mq_unused' \(logical, inactive", out)

        result = db.run("status", "--json")
        assert result.exit_code == 0, result.output
        horizon = json.loads(result.stdout)["vacuum_horizon"]
        assert horizon["standbys"] and horizon["standbys"][0]["xid_age"] >= 10
        assert horizon["standbys"][0]["client_addr"] == "127.0.0.1"
        assert [s["name"] for s in horizon["replication_slots"]] == ["mq_unused"]
        assert [p["gid"] for p in horizon["prepared_transactions"]] == ["mq-standby-gid"]

        # Held by the standby's transaction, not by the prepared one nor a stale
        # report: without the prepared one it stays; once it ends (and a checkpoint
        # logs the running transactions for the standby) the xmin moves on.
        with connect(server, "mq_horizon") as conn:
            conn.execute("ROLLBACK PREPARED 'mq-standby-gid'")
        with connect(server, "postgres") as conn:
            conn.execute("CHECKPOINT")
        threading.Event().wait(2.5)
        assert (_standby_xid_age(server) or 0) >= 10
        held.rollback()
        with connect(server, "postgres") as conn:
            conn.execute("CHECKPOINT")
        for _ in range(100):
            if (_standby_xid_age(server) or 0) < 5:
                break
            threading.Event().wait(0.2)
        result = db.run("check")
        assert re.search(r"ok\s+standbys\s+1 with hot_standby_feedback", result.stdout)

    finally:
        if held is not None:
            held.close()
        with connect(server, "mq_horizon") as conn:
            conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE gid = 'mq-standby-gid'"
            ).fetchall() and conn.execute("ROLLBACK PREPARED 'mq-standby-gid'")
        with connect(server, "postgres") as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = 'mq_unused'"
            )
        standby.close()
        server.sql("ALTER SYSTEM RESET hot_standby_feedback")
        server.sql("ALTER SYSTEM RESET wal_receiver_status_interval")
