"""group_ack's claim on MariaDB on a second thread, while a batch is worked through: measured.

    bench/.venv/bin/python bench/experiments/claim_thread.py [--messages 20000] [--work 600]
        [--switch-interval 0] [--rounds 3] [--url mysql://root@127.0.0.1:3306/mqbench_claim_thread]

On PostgreSQL the next claim goes to the server while a batch runs (libpq sends
it and reads it later, postgres/ahead.py). MariaDB's claim is a transaction of
four statements (the last group's DELETE, the SELECT ... FOR UPDATE SKIP
LOCKED, the guarded mark, the COMMIT), each waiting for the one before, so
PyMySQL cannot send it ahead: the only way to overlap it with the drain's work
is a second thread, whose reads need the GIL back after each packet. This loop
is the floor's (bench/floor.py, --ack batch: the DELETE in the claim's
transaction) with ``--work`` additions of Python per message standing in for
the drain's per-result work:

- in turn: claim, then work through the batch, as mq does;
- threaded: the next claim runs on a thread while the main thread works
  through the batch, then joins it (one thread a batch: ~0.1 ms against a claim
  of ~6 ms).

``--switch-interval`` sets sys.setswitchinterval (0: CPython's 5 ms): how soon
the main thread lets the claim's thread have the GIL back. Its database (the
URL's) is created if missing; its table mq_messages is made by `mq init` if
missing and emptied before each run. Prints messages a second each way.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]  # floor.py (standin.py is beside us)

import floor  # noqa: E402
from standin import work, work_line  # noqa: E402

QUEUE = "claim_thread"
BATCH = 100


def fill(db: Any, count: int) -> None:
    db.cur.execute("DELETE FROM mq_messages")
    sql = (
        "INSERT INTO mq_messages (queue, payload, status, available_at, created_at) "
        "VALUES (%s, %s, 'ready', NOW(6), NOW(6))"
    )
    for start in range(0, count, 1000):
        db.cur.executemany(sql, [(QUEUE, b"x" * 200)] * min(1000, count - start))


def claim(db: Any, done: list[int]) -> list[Any]:
    sql = db.sql

    def body() -> list[Any]:
        if done:
            many = sql["ack_delete_many"].replace("{ids}", db.ids(len(done)))
            db.cur.execute(many, (*done, "o"))
        db.cur.execute(sql["claim_select"], (QUEUE, BATCH))
        rows = list(db.cur.fetchall())
        if rows:
            mark = sql["claim_mark"].replace("{ids}", db.ids(len(rows)))
            db.cur.execute(mark, ("o", *[row[0] for row in rows]))
        return rows

    return db.transaction(body)


def in_turn(db: Any, rounds: int) -> float:
    done: list[int] = []
    handled = 0
    started = time.perf_counter()
    while rows := claim(db, done):
        for _ in rows:
            work(rounds)
        done = [row[0] for row in rows]
        handled += len(rows)
    return handled / (time.perf_counter() - started)


def threaded(db: Any, rounds: int) -> float:
    handled = 0
    started = time.perf_counter()
    rows = claim(db, [])
    while rows:
        box: list[list[Any]] = []
        done = [row[0] for row in rows]
        thread = threading.Thread(target=lambda box=box, done=done: box.append(claim(db, done)))
        thread.start()
        for _ in rows:
            work(rounds)
        thread.join()
        handled += len(rows)
        rows = box[0]
    return handled / (time.perf_counter() - started)


def database(url: str) -> Any:
    """The URL's database, created if missing, its table made by `mq init` if missing."""
    name = urlsplit(url).path.lstrip("/")
    server = floor.Db(url.replace(f"/{name}", "/mysql"))
    server.cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    mq = [sys.executable, "-m", "mq_cli", "--database", url, "init"]
    subprocess.run(mq, check=True, cwd=ROOT, capture_output=True)
    return floor.Db(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--work", type=int, default=600, help="additions per message")
    parser.add_argument("--switch-interval", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="mysql://root@127.0.0.1:3306/mqbench_claim_thread")
    args = parser.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    db = database(args.url)
    print(f"{work_line(args.work)}; switch interval {sys.getswitchinterval()}")
    for round_ in range(1, args.rounds + 1):
        fill(db, args.messages)
        one = in_turn(db, args.work)
        fill(db, args.messages)
        two = threaded(db, args.work)
        print(f"round {round_}: in turn {one:,.0f} msg/s, the claim on a thread {two:,.0f} msg/s")


if __name__ == "__main__":
    main()
