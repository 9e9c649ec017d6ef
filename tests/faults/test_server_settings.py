"""Server settings that broke mq (hardening issue), on a private MariaDB whose
global settings this module chooses: sql_mode=ORACLE,EMPTY_STRING_IS_NULL,
wait_timeout=2 and max_allowed_packet=4M. The shared server is not touched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

import mq_cli
from tests import servers
from tests.conftest import Db, cannot_run_here

PACKET = 4 << 20
LIMIT = PACKET // 2 - 1024  # what mq documents and enforces


@pytest.fixture(scope="module")
def server() -> Iterator[servers.PrivateMariadb]:
    reason = servers.unavailable()
    if reason:
        cannot_run_here(f"cannot start a private MariaDB: {reason}")
    server = servers.PrivateMariadb(
        extra=[
            "sql_mode=ORACLE,EMPTY_STRING_IS_NULL",
            "wait_timeout=2",
            f"max_allowed_packet={PACKET}",
        ]
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def db(server, tmp_path: Path, request) -> Iterator[Db]:
    name = "t_" + request.node.name.replace("[", "_").replace("]", "")[:40]
    server.node.sql(f"CREATE DATABASE `{name}`")
    db = Db("mysql", f"mysql://root@127.0.0.1:{server.port}/{name}", tmp_path)
    result = db.run("init")
    assert result.exit_code == 0, result.output
    try:
        yield db
    finally:
        server.node.sql(f"DROP DATABASE `{name}`")


def test_the_servers_sql_mode_does_not_change_what_mq_does(db, tmp_path, monkeypatch):
    """ORACLE made PyMySQL's BEGIN open a block; EMPTY_STRING_IS_NULL turned the
    unique-key tombstone's '' payload into NULL (the handler ran 3 times)."""
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  q: {handler: 'tests.jobs:record', unique_retention: 1h}\n"
    )
    for _ in range(3):
        assert db.run("enqueue", "-q", "q", "--unique-key", "once", '"x"').exit_code == 0
        result = db.run("drain", "-q", "q")
        assert result.exit_code == 0, result.output
    assert len(log.read_text().splitlines()) == 1
    assert db.sql("SELECT status FROM mq_messages") == [("done",)]
    failed = db.run("stats", "--json")
    assert json.loads(failed.stdout)["q"]["failed"] == 0


def test_handlers_longer_than_wait_timeout_log_nothing(db, tmp_path):
    """wait_timeout=2 s and 3 s handlers: each acknowledgement used to meet a
    closed connection and log a reconnect, which cron mails."""
    (tmp_path / "mq.yaml").write_text("queues:\n  q: {handler: 'tests.handlers:sleeps'}\n")
    assert db.run("enqueue", "-q", "q", '{"sleep": 3}', '{"sleep": 3}').exit_code == 0
    drain = db.spawn("drain", "-q", "q")
    out, err = drain.communicate(timeout=60)
    assert drain.returncode == 0, err
    assert err == b"" and out == b""
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def json_payload(size: int) -> bytes:
    return b'"' + b"a" * (size - 2) + b'"'


@pytest.mark.parametrize("size", [LIMIT + 1, PACKET // 2 - 8, 3_000_000, PACKET - 1024])
def test_a_payload_over_half_the_packet_is_refused_before_it_is_sent(db, size):
    # 4,193,280 (PACKET - 1024) was the documented limit; above PACKET / 2 each
    # of these dropped the connection: exit 3, retried for ever by cron.
    """The server drops the connection for values over max_allowed_packet / 2:
    mq must refuse them itself (exit 1, the real limit named), not exit 3."""
    result = db.run("enqueue", "-q", "q", input=json_payload(size))
    assert result.exit_code == 1, result.output
    assert "larger than the database accepts" in result.stderr
    assert f"({LIMIT} bytes)" in result.stderr
    assert "lost the connection" not in result.stderr
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_a_payload_at_the_limit_is_stored_byte_exact(db):
    payload = json_payload(LIMIT)
    result = db.run("enqueue", "-q", "q", input=payload)
    assert result.exit_code == 0, result.output
    assert db.sql(
        "SELECT LENGTH(payload), MD5(payload) = MD5(%s) FROM mq_messages", (payload,)
    ) == [(LIMIT, 1)]


def test_lines_of_large_payloads_are_split_into_statements_that_fit(db):
    # Five lines that together pass half the packet (each one is well under it).
    lines = b"\n".join(json_payload(900_000) for _ in range(5)) + b"\n"
    result = db.run("enqueue", "-q", "q", "--lines", input=lines)
    assert result.exit_code == 0, result.output
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(5,)]


def test_inside_the_applications_transaction_a_large_payload_leaves_it_intact(db, server):
    conn = pymysql.connect(
        host="127.0.0.1", port=server.port, user="root", database=db.url.rsplit("/", 1)[1],
        ssl_disabled=True, autocommit=False,
    )  # fmt: skip
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
            cursor.execute("CREATE TABLE orders (id INT PRIMARY KEY)")
            cursor.execute("START TRANSACTION")
            cursor.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(mq_cli.PayloadTooLarge, match=f"up to {LIMIT} bytes"):
            mq_cli.enqueue("q", b"x" * 3_000_000, connection=conn, format="bytes")
        conn.commit()  # the connection and the application's row survived
    finally:
        conn.close()
    assert db.sql("SELECT id FROM orders") == [(1,)]
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
