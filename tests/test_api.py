"""The Python API for producers: `mq_cli.connect(...)` and `mq_cli.enqueue(..., connection=)`.

The second form runs inside the application's own sqlite3 or PyMySQL
transaction: mq neither commits nor rolls back, so the message exists if and
only if the application's transaction commits.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import mq_cli
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ConfigError, InputRejected, MqError, SchemaMissing


def rows(db, queue: str = "q") -> list[tuple[int, bytes]]:
    found = db.sql("SELECT id, payload FROM mq_messages WHERE queue = %s ORDER BY id", (queue,))
    return [(int(i), bytes(p)) for i, p in found]


def app_connection(db):
    """The application's own driver connection, in its default (transactional) mode."""
    if db.kind == "sqlite":
        return sqlite3.connect(db.url.split(":///", 1)[1])
    if db.kind == "postgres":
        from tests.conftest import _pg_connect

        return _pg_connect(db.url, autocommit=False)
    import pymysql

    s = parse_database_url(db.url)
    return pymysql.connect(
        host=s.host, port=s.port, user=s.user or "root", password=s.password or "",
        database=s.database, ssl_disabled=True,
    )  # fmt: skip


def formats_config(tmp_path: Path) -> str:
    path = tmp_path / "formats.yaml"
    path.write_text("queues:\n  notes:\n    format: text\n  blobs:\n    format: bytes\n")
    return str(path)


# -- connect() ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [{"path": "/img/1.jpg", "sizes": [64, 128]}, [1, 2, 3], "text", 42, 1.5, True, None,
     {"unicode": "café ☕"}],
)  # fmt: skip
def test_enqueue_json_values(db, value):
    with mq_cli.connect(database=db.url) as mq:
        new_id = mq.enqueue("q", value)
    assert isinstance(new_id, int)
    ((stored_id, payload),) = rows(db)
    assert stored_id == new_id
    assert json.loads(payload) == value


def test_enqueue_bytes_on_a_json_queue_is_stored_as_is(db):
    with mq_cli.connect(database=db.url) as mq:
        new_id = mq.enqueue("q", b'{"as":  "is"}')
        with pytest.raises(InputRejected):
            mq.enqueue("q", b"{not json")
        with pytest.raises(InputRejected):
            mq.enqueue("q", float("nan"))
        with pytest.raises(InputRejected):
            mq.enqueue("q", {"when": object()})
    assert rows(db) == [(new_id, b'{"as":  "is"}')]


def test_too_deeply_nested_json_is_rejected_by_the_api(db):
    deep_bytes = b"[" * 100_000 + b"]" * 100_000
    deep_value: list = []
    for _ in range(100_000):
        deep_value = [deep_value]
    with mq_cli.connect(database=db.url) as mq:
        for payload in (deep_bytes, deep_value):
            with pytest.raises(InputRejected, match="too deeply nested"):
                mq.enqueue("q", payload)
        with pytest.raises(InputRejected, match="item 2: too deeply nested"):
            list(mq.enqueue_stream("q", [("item 1", b"[1]"), ("item 2", deep_bytes)]))
    conn = app_connection(db)
    try:
        with pytest.raises(InputRejected, match="too deeply nested"):
            mq_cli.enqueue("q", deep_value, connection=conn)
    finally:
        conn.close()
    assert rows(db) == [(rows(db)[0][0], b"[1]")]


def test_enqueue_many(db):
    values = [{"n": n} for n in range(2500)]
    with mq_cli.connect(database=db.url) as mq:
        ids = mq.enqueue_many("q", values)
    assert len(ids) == 2500 and all(isinstance(i, int) for i in ids)
    stored = rows(db)
    assert [i for i, _ in stored] == ids
    assert [json.loads(p) for _, p in stored] == values


def test_enqueue_many_stops_at_the_first_bad_value(db):
    with mq_cli.connect(database=db.url) as mq, pytest.raises(InputRejected) as caught:
        mq.enqueue_many("q", [{"n": 1}, {"n": 2}, {"bad": {1, 2}}, {"n": 4}])
    assert "2 message(s) before it were stored" in str(caught.value)
    assert [json.loads(p) for _, p in rows(db)] == [{"n": 1}, {"n": 2}]


def test_an_enqueue_that_stops_part_way_carries_the_ids_it_stored(db):
    values = [{"n": n} for n in range(1500)] + [{"bad": {1, 2}}]
    with mq_cli.connect(database=db.url) as mq, pytest.raises(InputRejected) as caught:
        mq.enqueue_many("q", values)
    stored = [i for i, _ in rows(db)]
    assert len(stored) == 1500 and caught.value.stored_ids == stored
    low, high = min(stored), max(stored)
    assert f"the 1500 message(s) before it were stored, ids {low}-{high}" in str(caught.value)


def test_enqueue_options(db):
    with mq_cli.connect(database=db.url) as mq:
        first = mq.enqueue("q", {}, priority=7, unique_key="k1", delay=60)
        assert mq.enqueue("q", {}, unique_key="k1") is None
        assert mq.enqueue_many("q", [[1], [2]], unique_key="k2")[1] is None
        assert mq.stats("q")["q"].delayed == 1
        with pytest.raises(ConfigError):
            mq.enqueue("q", {}, priority=2**31)
        with pytest.raises(ConfigError):
            mq.enqueue("bad name", {})
    # MariaDB stores the key as bytes (no collation, so no trailing-space padding)
    got = db.sql("SELECT priority, unique_key FROM mq_messages WHERE id = %s", (first,))
    assert [(p, k.decode() if isinstance(k, bytes) else k) for p, k in got] == [(7, "k1")]
    assert len(rows(db)) == 2


def test_text_and_bytes_formats_from_the_config(db, tmp_path: Path):
    with mq_cli.connect(config=formats_config(tmp_path), database=db.url) as mq:
        note = mq.enqueue("notes", "café, not JSON")
        with pytest.raises(InputRejected):
            mq.enqueue("notes", {"a": 1})  # a text queue takes str
        with pytest.raises(InputRejected):
            mq.enqueue("notes", b"\xff\xfe")  # ... and UTF-8 bytes
        blob = mq.enqueue("blobs", bytes(range(256)))
        blobs = mq.enqueue_many("blobs", [b"\0", b"", bytearray(b"\x80\x81")])
    assert rows(db, "notes") == [(note, "café, not JSON".encode())]
    assert rows(db, "blobs") == list(
        zip([blob, *blobs], [bytes(range(256)), b"\0", b"", b"\x80\x81"], strict=True)
    )


def test_connect_uses_the_config_lookup(db, tmp_path: Path):
    (tmp_path / "mq.yaml").write_text(f"database: {db.url}\nqueues:\n  notes:\n    format: text\n")
    with mq_cli.connect() as mq:
        new_id = mq.enqueue("notes", "plain words")
    assert rows(db, "notes") == [(new_id, b"plain words")]


def test_missing_table_is_schema_missing_through_connect(mysql_db):
    with mq_cli.connect(database=mysql_db.url) as mq, pytest.raises(SchemaMissing) as caught:
        mq.enqueue("q", {})
    assert "mq init" in str(caught.value)
    assert caught.value.exit_code == 3


# -- enqueue(connection=...) inside the application's transaction ---------------


def test_rollback_leaves_no_message(db):
    conn = app_connection(db)
    try:
        new_id = mq_cli.enqueue("q", {"order": 1}, connection=conn)
        assert isinstance(new_id, int)
        assert rows(db) == []  # seen from another connection: not committed by mq
        if db.kind == "sqlite":
            assert conn.in_transaction
        if db.kind == "postgres":
            import psycopg.pq

            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()
    finally:
        conn.close()
    assert rows(db) == []


def test_commit_makes_the_message_exist(db):
    conn = app_connection(db)
    try:
        new_id = mq_cli.enqueue("q", {"order": 2}, connection=conn)
        assert rows(db) == []
        conn.commit()
    finally:
        conn.close()
    ((stored_id, payload),) = rows(db)
    assert stored_id == new_id and json.loads(payload) == {"order": 2}


def test_message_shares_the_fate_of_the_applications_own_rows(db):
    conn = app_connection(db)
    try:
        cursor = conn.cursor()
        cursor.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.commit()
        cursor.execute("INSERT INTO orders (id) VALUES (1)")
        mq_cli.enqueue("q", {"order": 1}, connection=conn)
        conn.rollback()
        cursor.execute("INSERT INTO orders (id) VALUES (2)")
        mq_cli.enqueue("q", {"order": 2}, connection=conn)
        conn.commit()
        cursor.close()
    finally:
        conn.close()
    assert db.sql("SELECT id FROM orders") == [(2,)]
    assert [json.loads(p) for _, p in rows(db)] == [{"order": 2}]


def test_unique_key_inside_the_applications_transaction(db):
    committed = db.run("enqueue", "-q", "q", "--unique-key", "taken", "[0]")
    assert committed.exit_code == 0, committed.output
    conn = app_connection(db)
    try:
        first = mq_cli.enqueue("q", [1], connection=conn, unique_key="k")
        assert isinstance(first, int)
        assert mq_cli.enqueue("q", [2], connection=conn, unique_key="k") is None
        assert mq_cli.enqueue("q", [3], connection=conn, unique_key="taken") is None
        # A skipped duplicate does not spoil the transaction: what came before still commits.
        plain = mq_cli.enqueue("q", [4], connection=conn)
        conn.commit()
    finally:
        conn.close()
    assert [p for _, p in rows(db)] == [b"[0]", b"[1]", b"[4]"]
    assert {i for i, _ in rows(db)} >= {first, plain}


def test_rolled_back_unique_key_is_free_again(db):
    conn = app_connection(db)
    try:
        assert mq_cli.enqueue("q", [1], connection=conn, unique_key="k") is not None
        conn.rollback()
    finally:
        conn.close()
    result = db.run("enqueue", "-q", "q", "--unique-key", "k", "[2]")
    assert result.exit_code == 0 and result.stdout.strip()
    assert [p for _, p in rows(db)] == [b"[2]"]


def test_transactional_enqueue_formats(db):
    conn = app_connection(db)
    try:
        text_id = mq_cli.enqueue("notes", "hello", connection=conn, format="text")
        blob_id = mq_cli.enqueue("blobs", b"\0\xff", connection=conn, format="bytes")
        with pytest.raises(InputRejected):
            mq_cli.enqueue("q", b"{not json", connection=conn)  # bytes must be JSON already
        conn.commit()
    finally:
        conn.close()
    assert rows(db, "notes") == [(text_id, b"hello")]
    assert rows(db, "blobs") == [(blob_id, b"\0\xff")]


def test_transactional_enqueue_with_row_factories(db):
    """Applications often read rows as dicts; mq must not care how their cursor returns rows."""
    if db.kind == "mysql":
        import pymysql

        s = parse_database_url(db.url)
        conn = pymysql.connect(
            host=s.host, port=s.port, user=s.user or "root", database=s.database,
            ssl_disabled=True, cursorclass=pymysql.cursors.DictCursor,
        )  # fmt: skip
    elif db.kind == "postgres":
        import psycopg.rows

        conn = app_connection(db)
        conn.row_factory = psycopg.rows.dict_row
    else:
        conn = app_connection(db)
        conn.row_factory = sqlite3.Row
    try:
        small = mq_cli.enqueue("q", {"n": 1}, connection=conn, unique_key="dict")
        assert mq_cli.enqueue("q", {"n": 1}, connection=conn, unique_key="dict") is None
        conn.commit()
    finally:
        conn.close()
    assert [i for i, _ in rows(db)] == [small]


def test_transactional_enqueue_big_payload_on_a_dict_cursor(mysql_db):
    import pymysql

    assert mysql_db.run("init").exit_code == 0
    s = parse_database_url(mysql_db.url)
    conn = pymysql.connect(
        host=s.host, port=s.port, user=s.user or "root", database=s.database,
        ssl_disabled=True, cursorclass=pymysql.cursors.DictCursor,
    )  # fmt: skip
    try:
        new_id = mq_cli.enqueue("q", "x" * (2 << 20), connection=conn)
        conn.commit()
    finally:
        conn.close()
    assert [i for i, _ in rows(mysql_db)] == [new_id]


def test_transactional_enqueue_missing_table_sqlite(tmp_path: Path):
    conn = sqlite3.connect(tmp_path / "app.db")
    try:
        with pytest.raises(SchemaMissing) as caught:
            mq_cli.enqueue("q", {}, connection=conn)
        assert "mq init" in str(caught.value)
        with pytest.raises(SchemaMissing):
            mq_cli.enqueue("q", {}, connection=conn, unique_key="k")
    finally:
        conn.close()


def test_transactional_enqueue_missing_table_mysql(mysql_db):
    conn = app_connection(mysql_db)
    try:
        with pytest.raises(SchemaMissing) as caught:
            mq_cli.enqueue("q", {}, connection=conn)
        assert "mq init" in str(caught.value)
        with pytest.raises(SchemaMissing):
            mq_cli.enqueue("q", {}, connection=conn, table="other_table")
    finally:
        conn.close()


def test_transactional_enqueue_missing_table_postgres(pg_db):
    conn = app_connection(pg_db)
    try:
        with pytest.raises(SchemaMissing) as caught:
            mq_cli.enqueue("q", {}, connection=conn)
        assert "mq init" in str(caught.value)
        conn.rollback()  # PostgreSQL: an error ends the transaction's usefulness
        with pytest.raises(SchemaMissing):
            mq_cli.enqueue("q", {}, connection=conn, unique_key="k")
    finally:
        conn.close()


def test_transactional_enqueue_other_table(db):
    conn = app_connection(db)
    try:
        with pytest.raises(SchemaMissing):
            mq_cli.enqueue("q", {}, connection=conn, table="not_there")
        with pytest.raises(ConfigError):
            mq_cli.enqueue("q", {}, connection=conn, table="bad-name; DROP")
    finally:
        conn.close()


def test_transactional_enqueue_unknown_format(db):
    conn = app_connection(db)
    try:
        with pytest.raises(ConfigError) as caught:
            mq_cli.enqueue("q", "hello", connection=conn, format="jsn")
        assert "jsn" in str(caught.value)
    finally:
        conn.rollback()
        conn.close()
    assert rows(db) == []


@pytest.mark.parametrize("delay", [float("nan"), float("inf"), 1e12], ids=["nan", "inf", "huge"])
def test_bad_delay_through_the_api_is_a_config_error(db, delay: float):
    with mq_cli.connect(database=db.url) as mq, pytest.raises(ConfigError):
        mq.enqueue("q", {}, delay=delay)
    conn = app_connection(db)
    try:
        with pytest.raises(ConfigError):
            mq_cli.enqueue("q", {}, connection=conn, delay=delay)
    finally:
        conn.rollback()
        conn.close()
    assert rows(db) == []


def test_transactional_enqueue_rejects_other_connections():
    with pytest.raises(ConfigError) as caught:
        mq_cli.enqueue("q", {}, connection=object())
    assert "PyMySQL, psycopg or sqlite3" in str(caught.value)


def test_every_error_is_an_mq_error():
    for error in (ConfigError, InputRejected, SchemaMissing, mq_cli.DatabaseError,
                  mq_cli.PayloadTooLarge, mq_cli.HandlerNotFound):  # fmt: skip
        assert issubclass(error, MqError)
    assert (ConfigError.exit_code, InputRejected.exit_code, SchemaMissing.exit_code) == (2, 1, 3)


def test_every_documented_error_is_exported():
    import mq_cli

    for name in ("MqError", "ConfigError", "InputRejected", "PayloadTooLarge", "NotFound",
                 "DatabaseError", "SchemaMissing", "HandlerNotFound"):  # fmt: skip
        assert issubclass(getattr(mq_cli, name), mq_cli.MqError), name
        assert name in mq_cli.__all__
