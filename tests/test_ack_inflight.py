"""A success's DELETE sent ahead (MariaDB, PostgreSQL): read before anything else,
never lost.

The drain sends it and reads its result at the next result, so its own work on
that one overlaps the commit (mq_cli/backends/inflight.py and each server
dialect's inflight.py).
"""

from __future__ import annotations

import time

import pytest

from mq_cli.backends import open_backend
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ConnectionLost, MqError
from tests.conftest import _mysql_admin, _pg_connect
from tests.faults.history import read
from tests.fleet_helpers import enqueue, finish, host_config, spawn_drain

SLOW = "tests.faults.jobs:slow"


def backend_for(db):
    return open_backend(parse_database_url(db.url), "mq_messages")


@pytest.fixture(params=["mysql", "postgres"])
def server(request):
    """A database with the schema on the shared MariaDB or PostgreSQL."""
    db = request.getfixturevalue("mysql_db" if request.param == "mysql" else "pg_db")
    result = db.run("init")
    assert result.exit_code == 0, result.output
    return db


def test_the_servers_send_a_success_ahead(db):
    with backend_for(db) as b:
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        sent = b.ack_success_send(message, "drain-a")
        assert sent is (db.kind != "sqlite")
        if not sent:
            assert b.ack_success(message, "drain-a") is True
        else:
            assert b.ack_success_collect(message, "drain-a") is True
        assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_pymysql_without_the_two_halves_of_query_acknowledges_in_series(mysql_db):
    import pymysql

    from mq_cli.backends.mysql.inflight import splits_queries

    class Renamed:
        def query(self, sql):
            return 0

    assert splits_queries(pymysql.connections.Connection)  # the PyMySQL installed
    assert not splits_queries(Renamed)
    assert mysql_db.run("init").exit_code == 0
    with backend_for(mysql_db) as b:
        b._acks.usable = splits_queries(Renamed)
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(message, "drain-a") is False
        assert b.ack_success(message, "drain-a") is True
    assert mysql_db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_in_flight_is_read_before_the_next_statement(server):
    with backend_for(server) as b:
        b.enqueue("q", [b"1", b"2"])
        (first,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(first, "drain-a")
        # The next claim goes out on the same connection while the DELETE is in flight.
        (second,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(second, "drain-a")
        assert b.ack_success_collect(first, "drain-a") is True
        assert b.ack_success_collect(second, "drain-a") is True
        assert server.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_in_flight_for_a_message_taken_meanwhile_reads_false(server):
    with backend_for(server) as b:
        b.enqueue("q", [b"{}"])
        (mine,) = b.claim("q", 1, "drain-a")
        server.sql("UPDATE mq_messages SET status = 'ready', owner = NULL")
        (theirs,) = b.claim("q", 1, "drain-b")
        assert b.ack_success_send(mine, "drain-a")
        assert b.ack_success_collect(mine, "drain-a") is False
        assert server.sql("SELECT status, owner FROM mq_messages") == [("processing", "drain-b")]


def test_a_tombstone_is_not_sent_ahead(server):
    with backend_for(server) as b:
        b.enqueue("q", [b"{}"], unique_key="k")
        (message,) = b.claim("q", 1, "drain-a")
        assert b.ack_success_send(message, "drain-a", retention=60) is False


class Stuck:
    """The backend's DELETE held on a row lock by another session, for a test to end
    one way (``stop``: the session killed, or the statement cancelled)."""

    def __init__(self, db, backend):
        self.db = db
        if db.kind == "postgres":
            self.session = backend._rows("SELECT pg_backend_pid()")[0][0]
            self.waiting = (
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
            )
            self.locker = _pg_connect(db.url, autocommit=False)
        else:
            self.session = backend._rows("SELECT CONNECTION_ID()")[0][0]
            self.waiting = (
                "SELECT 1 FROM information_schema.INNODB_TRX "
                "WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT'"
            )
            self.locker = _mysql_admin()
            self.locker.autocommit(False)
            self.locker.select_db(parse_database_url(db.url).database)

    def __enter__(self):
        self.locker.cursor().execute("SELECT id FROM mq_messages FOR UPDATE")
        return self

    def send(self, backend, message):
        """Send the message's DELETE and return once it waits on the lock."""
        assert backend.ack_success_send(message, "drain-a")
        self._until(lambda: self.db.sql(self.waiting, (self.session,)), "waited on the lock")

    def _until(self, happened, what):
        deadline = time.monotonic() + 60
        while not happened():
            assert time.monotonic() < deadline, f"the DELETE never {what}"
            time.sleep(0.02)

    def kill_session(self):
        if self.db.kind == "postgres":
            # Waits until the session is gone (PostgreSQL 14+), before the lock is given up.
            self.db.sql("SELECT pg_terminate_backend(%s, 5000)", (self.session,))
            return
        self.db.sql("KILL %s", (self.session,))
        gone = "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s"
        # KILL returns before the session ends, and the lock must outlive it.
        self._until(lambda: not self.db.sql(gone, (self.session,)), "saw its session end")

    def cancel_statement(self):
        if self.db.kind == "postgres":
            # A signal to the backend: the lock must not be given up before it lands.
            self.db.sql("SELECT pg_cancel_backend(%s)", (self.session,))
            self._until(lambda: not self.db.sql(self.waiting, (self.session,)), "was cancelled")
        else:
            # Marks the statement killed at once; it ends when its lock wait does.
            self.db.sql("KILL QUERY %s", (self.session,))

    def __exit__(self, *exc_info):
        self.locker.rollback()
        self.locker.close()


def test_a_connection_cut_with_a_success_in_flight_runs_it_again(server):
    """The DELETE waits on a row lock when the session is killed: it never committed.
    Asked for its result, the backend finds the connection gone; reconnected, it runs
    the DELETE again, and the message is done once."""
    with backend_for(server) as b:
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        with Stuck(server, b) as stuck:
            stuck.send(b, message)
            stuck.kill_session()
        with pytest.raises(ConnectionLost):
            b.ack_success_collect(message, "drain-a")
        b.reconnect()
        assert b.ack_success_collect(message, "drain-a") is True
        assert server.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_statement_error_in_flight_is_its_messages_and_the_connection_goes_on(server):
    """The DELETE is cancelled on the server: the error is that message's, raised
    when its result is asked for (not by whatever statement came next), and asked
    again, the DELETE runs anew on the same connection."""
    with backend_for(server) as b:
        b.enqueue("q", [b"{}"])
        (message,) = b.claim("q", 1, "drain-a")
        with Stuck(server, b) as stuck:
            stuck.send(b, message)
            stuck.cancel_statement()
        assert b._rows("SELECT 1") == [(1,)]
        with pytest.raises(MqError) as raised:
            b.ack_success_collect(message, "drain-a")
        assert not isinstance(raised.value, ConnectionLost)
        assert b.ack_success_collect(message, "drain-a") is True
        assert server.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_success_is_deleted_while_the_next_handler_runs(server, tmp_path):
    """Sent ahead, a success is not held back by a long handler after it."""
    config = host_config(tmp_path, server.url, 0, "q", {"handler": SLOW})
    history = tmp_path / "history.jsonl"
    enqueue(server, "q", 1, sleep=0, prefix="fast")
    enqueue(server, "q", 1, sleep=4, prefix="slow")
    drain = spawn_drain(server, config, history, "-q", "q")
    try:
        deadline = time.monotonic() + 30
        while not any(r["event"] == "start" and r["msg"] == "slow0" for r in read(history)):
            assert time.monotonic() < deadline, "the slow handler never started"
            time.sleep(0.05)
        # The fast one is gone while the slow one runs: the order of events, not
        # within 0.5 s of its start.
        while server.sql("SELECT COUNT(*) FROM mq_messages") != [(1,)]:
            assert time.monotonic() < deadline, "the fast message was not deleted"
            time.sleep(0.05)
        slow_ended = any(r["event"] == "success" and r["msg"] == "slow0" for r in read(history))
        assert not slow_ended, "the slow handler ended before the fast one was deleted"
    finally:
        (report,) = finish([drain])
    assert report["succeeded"] == 2 and report["lost"] == 0
