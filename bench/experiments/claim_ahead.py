"""group_ack's claim sent ahead on PostgreSQL: what it would gain.

    bench/.venv/bin/python bench/experiments/claim_ahead.py [--messages 20000] [--work 150]
        [--rounds 3] [--url postgresql://postgres@127.0.0.1:5432/postgres]

A `group_ack` drain claims a batch and waits for the claim (mq's `claim_acking`:
the last group's DELETE and the next claim in one statement), then works
through the batch's results while the server is idle, and the child sits idle
through the next claim (bench/README.md, issue 38). This loop is that drain
without the child. It runs mq's own `claim_acking` from postgres/postgres.sql,
over mq's own table, with ``--work`` additions of Python per message standing in
for the drain's per-result work:

- in turn: claim, wait, then work through the batch, as mq does today;
- sent ahead: send the next claim through libpq (`PQsendQueryParams`) as soon as
  a batch arrives, work through the batch, then read the next claim's rows. The
  claim deletes the successes known when it goes, those of the batch before, so
  the DELETE lags one batch. Both hold at most two batches, and the second one is
  not worked on until the first is done.

Its database `mqbench_claim_ahead` is dropped and recreated through --url. Prints
the messages a second of each way, on a fresh table each run.
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg import pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from standin import work, work_line  # noqa: E402

from mq_cli.backends.postgres.dialect import queries  # noqa: E402
from mq_cli.backends.postgres.inflight import dollar_params  # noqa: E402

DATABASE = "mqbench_claim_ahead"
OWNER = "ahead"
BATCH = 100


def in_turn(conn: psycopg.Connection, sql: str, rounds: int) -> int:
    done: list[int] = []
    handled = 0
    while True:
        rows = conn.execute(sql, (done, OWNER, "q", BATCH, OWNER)).fetchall()
        done = [row[0] for row in rows if row[0] is not None]
        if not done:
            return handled
        for _ in done:
            work(rounds)
        handled += len(done)


def sent_ahead(conn: psycopg.Connection, sql: str, rounds: int) -> int:
    pgconn = conn.pgconn
    statement = dollar_params(sql)

    def wait() -> None:
        select.select([pgconn.socket], [], [])

    def results() -> list[pq.abc.PGresult]:
        got = []
        while True:
            pgconn.consume_input()
            if pgconn.is_busy():
                wait()
                continue
            result = pgconn.get_result()
            if result is None:
                return got
            got.append(result)

    def send(done: list[int]) -> None:
        ids = ("{" + ",".join(map(str, done)) + "}").encode()
        params = [ids, OWNER.encode(), b"q", str(BATCH).encode(), OWNER.encode()]
        pgconn.send_query_prepared(b"claim", params)
        while pgconn.flush():
            pass

    def collect() -> list[int]:
        taken: list[int] = []
        for result in results():
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise SystemExit(result.error_message.decode())
            for row in range(result.ntuples):
                value = result.get_value(row, 0)
                if value is not None:
                    taken.append(int(value))
        return taken

    # Prepared, as psycopg prepares the statement of the loop above from its fifth run.
    pgconn.send_prepare(b"claim", statement)
    if any(r.status != pq.ExecStatus.COMMAND_OK for r in results()):
        raise SystemExit("could not prepare the claim")
    handled = 0
    previous: list[int] = []
    send([])
    batch = collect()
    while batch:
        send(previous)  # the next claim goes now, with the batch before's successes
        for _ in batch:
            work(rounds)
        handled += len(batch)
        previous = batch
        batch = collect()
    send(previous)  # the last group's DELETE (claims nothing: the queue is empty)
    collect()
    return handled


def worker(url: str, mode: str, rounds: int) -> None:
    sql = queries("mq_messages")["claim_acking"]
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        started = time.perf_counter()
        handled = (in_turn if mode == "in turn" else sent_ahead)(conn, sql, rounds)
        print(handled, time.perf_counter() - started)


def fill(url: str, n: int) -> str:
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    target = url.rsplit("/", 1)[0] + "/" + DATABASE
    env = dict(os.environ, MQ_DATABASE_URL=target)
    env.pop("MQ_CONFIG", None)
    subprocess.run(
        [sys.executable, "-m", "mq_cli", "init"], env=env, check=True, capture_output=True
    )
    lines = b"".join(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 180) for i in range(n))
    subprocess.run(
        [sys.executable, "-m", "mq_cli", "enqueue", "-q", "q", "--lines", "--silent"],
        env=env, input=lines, check=True, capture_output=True,
    )  # fmt: skip
    with psycopg.connect(target, autocommit=True, sslmode="disable") as conn:
        conn.execute("VACUUM ANALYZE mq_messages")
    return target


def measure(url: str, mode: str, messages: int, rounds: int) -> float:
    target = fill(url, messages)
    me = [sys.executable, os.path.abspath(__file__), "worker", target, mode, str(rounds)]
    out = subprocess.run(me, check=True, capture_output=True).stdout.split()
    handled, seconds = int(out[0]), float(out[1])
    if handled != messages:
        raise SystemExit(f"{mode}: {handled} of {messages} handled")
    with psycopg.connect(target, autocommit=True, sslmode="disable") as conn:
        left = conn.execute("SELECT count(*) FROM mq_messages").fetchone()
    if left != (0,):
        raise SystemExit(f"{mode}: {left} left")
    return messages / seconds


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        url, mode, rounds = sys.argv[2:5]
        return worker(url, mode, int(rounds))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--work", type=int, default=150, help="additions per message")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(work_line(args.work))
    for round_ in range(1, args.rounds + 1):
        cells = [
            f"{mode} {measure(args.url, mode, args.messages, args.work):,.0f} msg/s"
            for mode in ("in turn", "sent ahead")
        ]
        print(f"round {round_}: " + ", ".join(cells))
    with psycopg.connect(args.url, autocommit=True, sslmode="disable") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    main()
