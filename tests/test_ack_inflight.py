"""A success's DELETE sent ahead (PostgreSQL): read before anything else, never lost.

The drain sends it and reads its result at the next result, so its own work on
that one overlaps the commit (mq_cli/backends/postgres/inflight.py).
"""

from __future__ import annotations

import time

import pytest

from mq_cli.backends import open_backend
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ConnectionLost
from tests.conftest import _pg_connect
from tests.faults.history import read
from tests.fleet_helpers import enqueue, finish, host_config, spawn_drain

SLOW = "tests.faults.jobs:slow"


def backend_for(db):
    return open_backend(parse_database_url(db.url), "mq_messages")


@pytest.fixture
def pg(pg_db):
    result = pg_db.run("init")
    assert result.exit_code == 0, result.output
    return pg_db


def test_only_postgres_sends_a_success_ahead(db):
    with backend_for(db) as b:
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        sent = b.ack_success_send(message, "drain-a")
        assert sent is (db.kind == "postgres")
        if not sent:
            assert b.ack_success(message, "drain-a") is True
        else:
            assert b.ack_success_collect(message, "drain-a") is True
        assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_in_flight_is_read_before_the_next_statement(pg):
    with backend_for(pg) as b:
        b.enqueue("q", [b"1", b"2"])
        (first,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(first, "drain-a")
        # The next claim goes out on the same connection while the DELETE is in flight.
        (second,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(second, "drain-a")
        assert b.ack_success_collect(first, "drain-a") is True
        assert b.ack_success_collect(second, "drain-a") is True
        assert pg.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_in_flight_for_a_message_taken_meanwhile_reads_false(pg):
    with backend_for(pg) as b:
        b.enqueue("q", [b"{}"])
        (mine,) = b.claim("q", 1, "drain-a")
        pg.sql("UPDATE mq_messages SET status = 'ready', owner = NULL")
        (theirs,) = b.claim("q", 1, "drain-b")
        assert b.ack_success_send(mine, "drain-a")
        assert b.ack_success_collect(mine, "drain-a") is False
        assert pg.sql("SELECT status, owner FROM mq_messages") == [("processing", "drain-b")]


def test_a_tombstone_is_not_sent_ahead(pg):
    with backend_for(pg) as b:
        b.enqueue("q", [b"{}"], unique_key="k")
        (message,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(message, "drain-a", retention=60) is False


def test_a_connection_cut_with_a_success_in_flight_runs_it_again(pg):
    """The DELETE waits on a row lock when the session is killed: it never committed.
    Asked for its result, the backend finds the connection gone; reconnected, it runs
    the DELETE again, and the message is done once."""
    with backend_for(pg) as b:
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        pid = b._rows("SELECT pg_backend_pid()")[0][0]
        with _pg_connect(pg.url, autocommit=False) as locker:
            locker.execute("SELECT id FROM mq_messages FOR UPDATE")
            assert b.ack_success_send(message, "drain-a")
            deadline = time.monotonic() + 60
            while not pg.sql(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", (pid,)
            ):
                assert time.monotonic() < deadline, "the DELETE never waited on the lock"
                time.sleep(0.02)
            # Waits until the session is gone (PostgreSQL 14+), before the lock is given up.
            pg.sql("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            locker.rollback()
        with pytest.raises(ConnectionLost):
            b.ack_success_collect(message, "drain-a")
        b.reconnect()
        assert b.ack_success_collect(message, "drain-a") is True
        assert pg.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_is_deleted_while_the_next_handler_runs(pg, tmp_path):
    """Sent ahead, a success is not held back by a long handler after it."""
    config = host_config(tmp_path, pg.url, 0, "q", {"handler": SLOW})
    history = tmp_path / "history.jsonl"
    enqueue(pg, "q", 1, sleep=0, prefix="fast")
    enqueue(pg, "q", 1, sleep=4, prefix="slow")
    drain = spawn_drain(pg, config, history, "-q", "q")
    try:
        deadline = time.monotonic() + 30
        while not any(r["event"] == "start" and r["msg"] == "slow0" for r in read(history)):
            assert time.monotonic() < deadline, "the slow handler never started"
            time.sleep(0.05)
        # The fast one is gone while the slow one runs: the order of events, not
        # within 0.5 s of its start.
        while pg.sql("SELECT COUNT(*) FROM mq_messages") != [(1,)]:
            assert time.monotonic() < deadline, "the fast message was not deleted"
            time.sleep(0.05)
        slow_ended = any(r["event"] == "success" and r["msg"] == "slow0" for r in read(history))
        assert not slow_ended, "the slow handler ended before the fast one was deleted"
    finally:
        (report,) = finish([drain])
    assert report["succeeded"] == 2 and report["lost"] == 0
