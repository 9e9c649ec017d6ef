"""bench/web_console.py's fill: millions of messages in a realistic mix, set-based, fast.

One INSERT ... SELECT per chunk of ``CHUNK`` rows, its rows made by the database
itself (PostgreSQL's generate_series, MariaDB's sequence engine `seq_A_to_B`,
SQLite a recursive CTE), so 10M rows take minutes, not the hours of enqueue_many.
Row n (1..N) of the mix:

- queue: 70 % `bench`, 15 % `mail`, 10 % `thumbs`, 5 % `reports` (n % 20);
- state (n % 97): ~82 % ready (created over the last N x 10 ms, due since then),
  ~8 % delayed (due within the next hour), ~7 % failed (a last_error, 3 errors),
  ~2 % done tombstones with a unique key; one in 9,973 processing, held by an
  owner no drain has (so stalled);
- priority 5 for one in 50, a unique key ``k<n>`` for one in 10.

The bench's own SQL, not mq's: it writes rows as mq would store them, with
mq's table made first by `mq init`.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote, urlparse

CHUNK = 500_000
QUEUES = ("bench", "mail", "thumbs", "reports")

# The columns and their values from n (the row's number) and N (the total), in
# each dialect's words: {q} the queue, {k} n % 97, {ago} seconds since created.
_CASES = {
    "queue": "CASE WHEN n % 20 < 14 THEN 'bench' WHEN n % 20 < 17 THEN 'mail' "
    "WHEN n % 20 < 19 THEN 'thumbs' ELSE 'reports' END",
    "status": "CASE WHEN n % 9973 = 0 THEN 'processing' WHEN n % 97 < 80 THEN 'ready' "
    "WHEN n % 97 < 88 THEN 'delayed' WHEN n % 97 < 95 THEN 'failed' "
    "WHEN n % 97 < 97 AND n % 10 = 0 THEN 'done' ELSE 'ready' END",
    "priority": "CASE WHEN n % 50 = 0 THEN 5 ELSE 0 END",
    "error_count": "CASE WHEN n % 9973 <> 0 AND n % 97 >= 88 AND n % 97 < 95 THEN 3 ELSE 0 END",
    "last_error": "CASE WHEN n % 9973 <> 0 AND n % 97 >= 88 AND n % 97 < 95 "
    "THEN {concat_error} ELSE NULL END",
    "unique_key": "CASE WHEN n % 10 = 0 THEN {concat_key} ELSE NULL END",
}
_DELAYED = "n % 9973 <> 0 AND n % 97 >= 80 AND n % 97 < 88"
_PROCESSING = "n % 9973 = 0"

DIALECT: dict[str, dict[str, str]] = {
    "sqlite": {
        "rows": "WITH RECURSIVE s(n) AS (SELECT {a} UNION ALL SELECT n + 1 FROM s WHERE n < {b}) ",
        "from": "s",
        "ago": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (({N} - n) * 0.01) || ' seconds')",
        "ahead": "strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (n % 3600 + 60) || ' seconds')",
        "now": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        "concat_error": "'exit status 1: boom ' || (n % 7)",
        "concat_key": "'k' || n",
        "payload": "CAST('{{\"n\": ' || n || '}}' AS BLOB)",
        "quote": '"',
    },
    "postgres": {
        "rows": "",
        "from": "pg_catalog.generate_series({a}::bigint, {b}::bigint) AS s(n)",
        "ago": "pg_catalog.now() - pg_catalog.make_interval(secs => ({N} - n) * 0.01)",
        "ahead": "pg_catalog.now() + pg_catalog.make_interval(secs => n % 3600 + 60)",
        "now": "pg_catalog.now()",
        "concat_error": "'exit status 1: boom ' || (n % 7)",
        "concat_key": "'k' || n",
        "payload": "pg_catalog.convert_to('{{\"n\": ' || n || '}}', 'UTF8')",
        "quote": '"',
    },
    "mysql": {
        "rows": "",
        "from": "(SELECT seq AS n FROM seq_{a}_to_{b}) AS s",
        "ago": "UTC_TIMESTAMP(6) - INTERVAL (({N} - n) * 10000) MICROSECOND",
        "ahead": "UTC_TIMESTAMP(6) + INTERVAL (n % 3600 + 60) SECOND",
        "now": "UTC_TIMESTAMP(6)",
        "concat_error": "CONCAT('exit status 1: boom ', n % 7)",
        "concat_key": "CONCAT('k', n)",
        "payload": "CAST(CONCAT('{{\"n\": ', n, '}}') AS BINARY)",
        "quote": "`",
    },
}


def kind_of(url: str) -> str:
    scheme = url.split(":", 1)[0]
    return {"sqlite": "sqlite", "mysql": "mysql", "mariadb": "mysql"}.get(scheme, "postgres")


def connect(url: str) -> Any:
    kind = kind_of(url)
    if kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA cache_size=-400000")
        return db
    if kind == "postgres":
        import psycopg

        return psycopg.connect(url, autocommit=True)
    import pymysql

    parts = urlparse(url)
    return pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""), database=parts.path.lstrip("/"), autocommit=True,
    )  # fmt: skip


def insert_sql(kind: str, table: str, first: int, last: int, total: int) -> str:
    d = DIALECT[kind]
    cases = {name: sql.format(**d) for name, sql in _CASES.items()}
    ago = d["ago"].format(N=total)
    q = d["quote"]
    return (
        d["rows"].format(a=first, b=last)  # noqa: S608
        + f"INSERT INTO {q}{table}{q} (queue, status, priority, available_at, created_at, "  # noqa: S608
        "heartbeat_at, owner, error_count, last_error, unique_key, payload) "
        f"SELECT {cases['queue']}, {cases['status']}, {cases['priority']}, "
        f"CASE WHEN {_DELAYED} THEN {d['ahead']} WHEN {_PROCESSING} THEN {d['now']} "
        f"ELSE {ago} END, {ago}, "
        f"CASE WHEN {_PROCESSING} THEN {d['now']} ELSE NULL END, "
        f"CASE WHEN {_PROCESSING} THEN 'bench-host:0:gone' ELSE NULL END, "
        f"{cases['error_count']}, {cases['last_error']}, {cases['unique_key']}, "
        f"{d['payload'].format()} FROM {d['from'].format(a=first, b=last)}"  # noqa: S608
    )


def fill(url: str, table: str, total: int) -> None:
    """Add ``total`` rows of the mix to mq's (empty, initialised) table, then let the
    database gather its statistics as autovacuum / InnoDB / `mq gc` would."""
    kind = kind_of(url)
    db = connect(url)
    started = time.monotonic()
    try:
        for first in range(1, total + 1, CHUNK):
            last = min(first + CHUNK - 1, total)
            sql = insert_sql(kind, table, first, last, total)
            if kind == "sqlite":
                db.execute("BEGIN")
                db.execute(sql)
                db.execute("COMMIT")
            else:
                with db.cursor() as cursor:
                    cursor.execute(sql)
            print(f"  {last:>10} rows, {time.monotonic() - started:6.1f} s", flush=True)
        if kind == "postgres":
            db.execute(f'VACUUM (ANALYZE) "{table}"')
        elif kind == "mysql":
            with db.cursor() as cursor:
                cursor.execute(f"ANALYZE TABLE `{table}`")
                cursor.fetchall()
    finally:
        db.close()
    print(f"filled {total} messages in {time.monotonic() - started:.1f} s", flush=True)


def drop(url: str, table: str) -> None:
    """Drop the table and its companions (``table_*``): a fresh start, or done."""
    kind = kind_of(url)
    db = connect(url)
    try:
        if kind == "sqlite":
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        else:
            with db.cursor() as cursor:
                if kind == "postgres":
                    cursor.execute(
                        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = "
                        "pg_catalog.current_schema()"
                    )
                else:
                    cursor.execute("SHOW TABLES")
                names = [r[0] for r in cursor.fetchall()]
        q = DIALECT[kind]["quote"]
        for name in names:
            if name == table or name.startswith(table + "_"):
                if kind == "sqlite":
                    db.execute(f"DROP TABLE IF EXISTS {q}{name}{q}")
                else:
                    with db.cursor() as cursor:
                        cursor.execute(f"DROP TABLE IF EXISTS {q}{name}{q}")
    finally:
        db.close()


def count(url: str, table: str) -> int:
    db = connect(url)
    q = DIALECT[kind_of(url)]["quote"]
    try:
        cursor = db.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {q}{table}{q}")  # noqa: S608
        return int(cursor.fetchone()[0])
    except Exception:  # no table yet
        return -1
    finally:
        db.close()
