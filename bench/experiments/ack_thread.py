"""Would an acknowledgement on a second thread hide the drain's own work? Measured.

    bench/.venv/bin/python bench/experiments/ack_thread.py [--messages 20000] [--work 3000]
        [--mysql-url mysql://root@127.0.0.1:3306/mqbench_ack]
        [--pg-url postgresql://postgres@127.0.0.1:5432/postgres] [--rounds 2]

Issue 22 asked to overlap a message's acknowledgement with the drain's work on
the next result, one acknowledgement in flight. In CPython that means a second
thread, and the handoff between the two goes through the GIL. This loop is the
floor's (one `DELETE ... WHERE id = ? AND owner = ?` per message, autocommit)
with ``--work`` additions of Python before each DELETE, standing in for the
drain's per-message work (reading the worker's reply, the run log, the ticks):

- serial: work, then the DELETE, as mq does;
- threaded: work on the main thread while the previous message's DELETE runs on
  a second thread (queue.SimpleQueue both ways), waiting for it before handing
  over the next: at most one acknowledgement in flight.

SQLite in a temporary file (WAL, synchronous=NORMAL, as mq); MariaDB and
PostgreSQL in the databases of --mysql-url and --pg-url (their table
`ack_thread` is dropped and recreated).
Prints µs per message for each.
"""

from __future__ import annotations

import argparse
import os
import queue
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from standin import work, work_line

DELETE = "DELETE FROM ack_thread WHERE id = {m} AND owner = {m}"


def sqlite_table(path: str, n: int) -> tuple[Any, str]:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("DROP TABLE IF EXISTS ack_thread")
    conn.execute("CREATE TABLE ack_thread (id INTEGER PRIMARY KEY, owner TEXT, payload BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO ack_thread (owner, payload) VALUES ('o', ?)", [(b"x" * 200,)] * n)
    conn.execute("COMMIT")
    return conn.cursor(), DELETE.format(m="?")


def mysql_table(url: str, n: int) -> tuple[Any, str]:
    import pymysql

    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    server = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                             user=parts.username or "root", password=parts.password or "",
                             autocommit=True, ssl_disabled=True)  # fmt: skip
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    server.select_db(database)
    cur = server.cursor()
    cur.execute("DROP TABLE IF EXISTS ack_thread")
    cur.execute("CREATE TABLE ack_thread (id INT PRIMARY KEY AUTO_INCREMENT, "
                "owner VARCHAR(40), payload BLOB) ENGINE=InnoDB")  # fmt: skip
    for start in range(0, n, 1000):
        rows = min(1000, n - start)
        cur.executemany(
            "INSERT INTO ack_thread (owner, payload) VALUES ('o', %s)", [b"x" * 200] * rows
        )
    return cur, DELETE.format(m="%s")


def pg_table(url: str, n: int) -> tuple[Any, str]:
    import psycopg

    conn = psycopg.connect(url, autocommit=True, sslmode="disable")
    conn.execute("DROP TABLE IF EXISTS ack_thread")
    conn.execute("CREATE TABLE ack_thread (id bigserial PRIMARY KEY, owner text, payload bytea)")
    conn.execute(
        "INSERT INTO ack_thread (owner, payload) SELECT 'o', %s FROM generate_series(1, %s)",
        (b"x" * 200, n),
    )
    return conn.cursor(), DELETE.format(m="%s")


def serial(cur: Any, delete: str, n: int, rounds: int) -> float:
    started = time.perf_counter()
    for ident in range(1, n + 1):
        work(rounds)
        cur.execute(delete, (ident, "o"))
    return time.perf_counter() - started


def threaded(cur: Any, delete: str, n: int, rounds: int) -> float:
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def acknowledger() -> None:
        while (ident := todo.get()) is not None:
            cur.execute(delete, (ident, "o"))
            done.put(ident)

    thread = threading.Thread(target=acknowledger)
    thread.start()
    started = time.perf_counter()
    in_flight = False
    for ident in range(1, n + 1):
        work(rounds)
        if in_flight:
            done.get()
        todo.put(ident)
        in_flight = True
    if in_flight:
        done.get()
    elapsed = time.perf_counter() - started
    todo.put(None)
    thread.join()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--work", type=int, default=3000, help="additions before each DELETE")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306/mqbench_ack")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(work_line(args.work, "Python work before each DELETE"))
    with tempfile.TemporaryDirectory() as tmp:
        tables: dict[str, Callable[[int], tuple[Any, str]]] = {
            "SQLite": lambda n: sqlite_table(os.path.join(tmp, "ack.db"), n),
            "MariaDB": lambda n: mysql_table(args.mysql_url, n),
            "PostgreSQL": lambda n: pg_table(args.pg_url, n),
        }
        for name, table in tables.items():
            # A server's DELETE waits on a log flush: fewer messages for the same time.
            n = args.messages if name == "SQLite" else max(args.messages // 5, 1)
            for round_ in range(1, args.rounds + 1):
                one = serial(*table(n), n, args.work) / n * 1e6
                two = threaded(*table(n), n, args.work) / n * 1e6
                print(f"{name}, round {round_}, {n} messages: serial {one:.0f} µs/message, "
                      f"one acknowledgement in flight on a thread {two:.0f} µs/message")  # fmt: skip


if __name__ == "__main__":
    main()
