"""The floor: mq's own SQL statements in a bare PyMySQL/sqlite3 loop, no mq code in it.

The statements are read from mq_cli/backends/*/*.sql (``load_queries``) so
they stay in step with mq; the connection is set up as mq's (TLS off, READ
COMMITTED, autocommit on MariaDB; WAL, synchronous=NORMAL, BEGIN IMMEDIATE on
SQLite). What this loop reaches is the physical limit of mq's design on this
server; the bench reports mq's ratio to it. With ``--ack batch`` a batch's DELETE
runs in the next claim's transaction, as mq's group_ack does.

    python floor.py drain URL --batch 100 --ack each|batch
    python floor.py insert URL --count 100000 --rows 1000

Prints one JSON line: what it did and its own timing (without interpreter start).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from mq_cli.backends.sqlfiles import load_queries

TABLE = "mq_messages"
RETRY = {1213, 1205}  # deadlock, lock wait timeout: mq retries them too
NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def statements(kind: str) -> dict[str, str]:
    sql = load_queries("mysql" if kind == "mysql" else "sqlite")
    return {k: v.replace("{table}", TABLE).replace("{now}", NOW) for k, v in sql.items()}


class Db:
    """Just enough to run a statement, a transaction, and retry MariaDB's 1213/1205."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.kind = "sqlite" if parts.scheme == "sqlite" else "mysql"
        self.mark = "?" if self.kind == "sqlite" else "%s"
        self.sql = statements(self.kind)
        if self.kind == "mysql":
            import pymysql

            self.errors: Any = pymysql.err.OperationalError
            self.conn: Any = pymysql.connect(
                host=parts.hostname,
                port=parts.port or 3306,
                user=parts.username or "root",
                password=parts.password or "",
                database=parts.path.lstrip("/"),
                autocommit=True,
                charset="utf8mb4",
                ssl_disabled=True,
                init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            )
            self.cur = self.conn.cursor()
        else:
            import sqlite3

            self.errors = ()
            self.conn = sqlite3.connect(parts.path[1:], timeout=60, isolation_level=None)
            self.conn.execute("PRAGMA busy_timeout = 60000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.cur = self.conn.cursor()
        self.retries = 0

    def ids(self, count: int) -> str:
        return ", ".join([self.mark] * count)

    def retrying(self, body: Any) -> Any:
        for attempt in range(20):
            try:
                return body()
            except self.errors as exc:
                if exc.args[0] not in RETRY:
                    raise
                self.retries += 1
                try:
                    self.conn.rollback()
                except Exception:
                    pass
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise RuntimeError("retries exhausted")

    def transaction(self, body: Any) -> Any:
        def once() -> Any:
            self.cur.execute("BEGIN IMMEDIATE" if self.kind == "sqlite" else "BEGIN")
            try:
                result = body()
            except BaseException:
                self.cur.execute("ROLLBACK")
                raise
            self.cur.execute("COMMIT")
            return result

        return self.retrying(once)

    def change(self, sql: str, params: tuple[Any, ...]) -> int:
        def once() -> int:
            self.cur.execute(sql, params)
            return int(self.cur.rowcount)

        return self.retrying(once)


def drain(db: Db, queue: str, batch: int, ack: str) -> dict[str, Any]:
    sql = db.sql
    owner = f"floor:{os.getpid()}"
    deleted = claims = 0

    def claim(done: list[int]) -> tuple[int, list[Any]]:
        # ``done`` (--ack batch: the last batch) is deleted in the claim's transaction,
        # as mq's group_ack does (claims.claim_acking): one commit a batch.
        grouped = 0
        if done:
            many = sql["ack_delete_many"].replace("{ids}", db.ids(len(done)))
            db.cur.execute(many, (*done, owner))
            grouped = db.cur.rowcount
        db.cur.execute(sql["claim_select"], (queue, batch))
        rows = db.cur.fetchall()
        if rows:
            mark = sql["claim_mark"].replace("{ids}", db.ids(len(rows)))
            db.cur.execute(mark, (owner, *[row[0] for row in rows]))
        return grouped, list(rows)

    started = time.perf_counter()
    done: list[int] = []
    while True:
        grouped, rows = db.transaction(functools.partial(claim, done))
        deleted += grouped
        done = []
        claims += 1
        if not rows:
            break
        ids = [row[0] for row in rows]
        if ack == "each":
            for message_id in ids:
                deleted += db.change(sql["ack_delete"], (message_id, owner))
        else:
            done = ids
    return {
        "succeeded": deleted,
        "claims": claims,
        "retries": db.retries,
        "seconds": time.perf_counter() - started,
    }


def insert(db: Db, queue: str, count: int, rows: int, size: int) -> dict[str, Any]:
    """mq's multi-row INSERT (RETURNING id on MariaDB), ``rows`` per transaction."""
    sql = db.sql
    payloads = []
    for n in range(count):
        head = f'{{"n":{n},"pad":"'
        payloads.append((head + "x" * (size - len(head) - 2) + '"}').encode())
    started = time.perf_counter()
    stored = 0
    returning = db.kind == "mysql" and "insert_returning" in sql
    for start in range(0, count, rows):
        chunk = payloads[start : start + rows]
        values = ",".join([sql["insert_row"]] * len(chunk))
        params: list[Any] = []
        delay: Any = 0 if db.kind == "mysql" else "+0.000 seconds"
        for p in chunk:
            params += (queue, "ready", 0, delay, None, p)
        statement = sql["insert_returning" if returning else "insert"].replace("{values}", values)

        def once(
            statement: str = statement, params: list[Any] = params, n: int = len(chunk)
        ) -> int:
            db.cur.execute(statement, params)
            if returning:
                return len(db.cur.fetchall())
            return n

        stored += db.transaction(once)
    return {"stored": stored, "seconds": time.perf_counter() - started}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["drain", "insert"])
    parser.add_argument("url")
    parser.add_argument("--queue", default="bench")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--ack", choices=["each", "batch"], default="each")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args(argv)
    db = Db(args.url)
    if args.mode == "drain":
        result = drain(db, args.queue, args.batch, args.ack)
    else:
        result = insert(db, args.queue, args.count, args.rows, args.size)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
