"""PostgreSQL figures: mq's own statements in a bare psycopg loop (the floor) against
`mq drain` at batch 100, and `mq enqueue --lines` against a bare multi-row INSERT.

    .venv/bin/python bench/postgres.py [--url postgresql://postgres@127.0.0.1:5432/postgres]

Uses (drops and recreates) the database `mqbench_pg` on that server. Every
figure is work / wall time; the mq figures include interpreter start, as a
crontab line pays it. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mq_cli.backends.postgres import queries  # noqa: E402

DATABASE = "mqbench_pg"
MESSAGES = int(os.environ.get("MQ_BENCH_MESSAGES", 20_000))
LINES = int(os.environ.get("MQ_BENCH_LINES", 100_000))
PAYLOAD = b'{"n": 1, "pad": "' + b"x" * 180 + b'"}'


def admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, sslmode="disable")


def fresh(url: str) -> str:
    with admin(url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    target = url.rsplit("/", 1)[0] + "/" + DATABASE
    mq("init", url=target)
    return target


def mq(*args: str, url: str, stdin: bytes | None = None) -> float:
    env = dict(os.environ, MQ_DATABASE_URL=url, PYTHONPATH=f"{ROOT}:{ROOT / 'bench' / 'jobs'}")
    env.pop("MQ_CONFIG", None)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "mq_cli", *args], input=stdin, env=env, cwd=tmp,
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        return time.perf_counter() - started


def load(url: str, count: int) -> None:
    with psycopg.connect(url, sslmode="disable") as conn:
        conn.execute(
            "INSERT INTO mq_messages (queue, available_at, created_at, payload) "
            "SELECT 'q', now(), now(), %s FROM generate_series(1, %s)",
            (PAYLOAD, count),
        )
        conn.execute("ANALYZE mq_messages")


def floor_drain(url: str, batch: int, ack_many: bool) -> float:
    sql = queries("mq_messages")
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        started = time.perf_counter()
        done = 0
        while rows := conn.execute(sql["claim"], ("q", batch, "floor")).fetchall():
            ids = [row[0] for row in rows]
            if ack_many:
                marks = ", ".join(["%s"] * len(ids))
                conn.execute(sql["ack_delete_many"].replace("{ids}", marks), (*ids, "floor"))
            else:
                for ident in ids:
                    conn.execute(sql["ack_delete"], (ident, "floor"))
            done += len(ids)
        assert done == MESSAGES, done
        return MESSAGES / (time.perf_counter() - started)


def floor_insert(url: str, rows: int) -> float:
    sql = queries("mq_messages")
    statement = sql["insert"].replace("{values}", ",".join([sql["insert_row"]] * rows))
    params = [value for _ in range(rows) for value in ("q", 0, 0.0, None, PAYLOAD)]
    with psycopg.connect(url, sslmode="disable") as conn:
        started = time.perf_counter()
        for _ in range(LINES // rows):
            conn.execute(statement, params).fetchall()
            conn.commit()
        return LINES / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    url = parser.parse_args().url
    with admin(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        fsync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    figures: list[tuple[str, float]] = []
    for _round in (1, 2):  # interleaved: the machine is shared
        for ack_many in (False, True):
            db = fresh(url)
            load(db, MESSAGES)
            name = "floor: claim 100 + " + (
                "one DELETE ... IN per batch" if ack_many else "DELETE each"
            )
            figures.append((name, floor_drain(db, 100, ack_many)))
        db = fresh(url)
        load(db, MESSAGES)
        took = mq("drain", "-q", "q", "--handler", "mqbench_jobs:noop",
                  "--batch-size", "100", url=db)  # fmt: skip
        figures.append(("mq drain --batch-size 100, no-op handler", MESSAGES / took))
        db = fresh(url)
        figures.append(
            ("floor: multi-row INSERT, 1,000 rows per transaction", floor_insert(db, 1000))
        )
        db = fresh(url)
        lines = b"".join(PAYLOAD + b"\n" for _ in range(LINES))
        took = mq("enqueue", "-q", "q", "--lines", "--silent", url=db, stdin=lines)
        figures.append((f"mq enqueue --lines ({LINES:,} lines)", LINES / took))
    with admin(url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    best: dict[str, float] = {}
    for name, value in figures:
        best[name] = max(best.get(name, 0.0), value)
    print(f"PostgreSQL {version} (synchronous_commit={fsync}), {os.cpu_count()} CPUs, "
          f"{MESSAGES:,} messages of {len(PAYLOAD)} bytes; best of 2 interleaved rounds\n")  # fmt: skip
    print("| what | msgs/s |\n| --- | --- |")
    for name, value in best.items():
        print(f"| {name} | {value:,.0f} |")


if __name__ == "__main__":
    main()
