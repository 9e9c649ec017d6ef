"""One acknowledgement in flight without a thread, on PostgreSQL: what it would gain.

    bench/.venv/bin/python bench/experiments/ack_inflight.py [--messages 4000] [--work 3000]
        [--procs 1,2] [--rounds 2] [--url postgresql://postgres@127.0.0.1:5432/postgres]

bench/experiments/ack_thread.py shows that a second thread cannot hide the drain's work
behind the acknowledgement's commit. libpq can, in one thread: the DELETE is
sent (`PQsendQueryParams`), the drain does its work for the next message while
the server commits, then reads the result (`PQgetResult`) before it sends the
next. This loop is the floor's (one `DELETE ... WHERE id = $1 AND owner = $2`
per message, autocommit) with ``--work`` additions of Python per message
standing in for the drain's work, in P processes started together over their
own rows:

- psycopg: the work, then `cursor.execute` of the DELETE, as mq does today;
- in flight: send the DELETE (prepared once, as psycopg prepares it), do the
  next message's work, then read its result.

Its table `ack_inflight` lives in the database `mqbench_inflight` (dropped and
recreated through --url). Prints µs per message (wall time of the slowest
process over its own messages).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psycopg
from psycopg import pq
from standin import work, work_line

DATABASE = "mqbench_inflight"
DELETE = "DELETE FROM ack_inflight WHERE id = {a} AND owner = {b}"


def psycopg_loop(conn: psycopg.Connection, ids: range, rounds: int) -> None:
    cur = conn.cursor()
    statement = DELETE.format(a="%s", b="%s")
    for ident in ids:
        work(rounds)
        cur.execute(statement, (ident, "o"))
        if cur.rowcount != 1:
            raise SystemExit(f"message {ident} not deleted")


def in_flight_loop(conn: psycopg.Connection, ids: range, rounds: int) -> None:
    pgconn = conn.pgconn
    statement = DELETE.format(a="$1", b="$2").encode()

    def collect(ident: int) -> None:
        deleted = 0
        while (result := pgconn.get_result()) is not None:
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise SystemExit(f"message {ident}: {result.error_message.decode()}")
            deleted += result.command_tuples or 0
        if deleted != 1:
            raise SystemExit(f"message {ident} not deleted")

    # Prepared, as psycopg prepares a statement from its fifth run: parsing and
    # planning each DELETE again would cost the server more than the floor pays.
    pgconn.send_prepare(b"ack", statement)
    if (prepared := pgconn.get_result()) is None or prepared.status != pq.ExecStatus.COMMAND_OK:
        raise SystemExit("could not prepare the DELETE")
    while pgconn.get_result() is not None:
        pass
    sent = None
    for ident in ids:
        work(rounds)  # the next message's work, while the last DELETE commits
        if sent is not None:
            collect(sent)
        pgconn.send_query_prepared(b"ack", [str(ident).encode(), b"o"])
        sent = ident
    if sent is not None:
        collect(sent)


def worker(url: str, mode: str, first: int, count: int, rounds: int) -> None:
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        ids = range(first, first + count)
        started = time.perf_counter()
        (psycopg_loop if mode == "psycopg" else in_flight_loop)(conn, ids, rounds)
        print(time.perf_counter() - started)


def fill(url: str, n: int) -> str:
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    target = url.rsplit("/", 1)[0] + "/" + DATABASE
    with psycopg.connect(target, autocommit=True, sslmode="disable") as conn:
        conn.execute(
            "CREATE TABLE ack_inflight (id bigserial PRIMARY KEY, owner text, payload bytea)"
        )
        conn.execute(
            "INSERT INTO ack_inflight (owner, payload) SELECT 'o', %s FROM generate_series(1, %s)",
            (b"x" * 200, n),
        )
        conn.execute("ANALYZE ack_inflight")
    return target


def measure(url: str, mode: str, messages: int, procs: int, rounds: int) -> float:
    target = fill(url, messages)
    share = messages // procs
    me = [sys.executable, os.path.abspath(__file__), "worker", target, mode]
    runs = [
        subprocess.Popen([*me, str(1 + p * share), str(share), str(rounds)], stdout=subprocess.PIPE)
        for p in range(procs)
    ]
    seconds = []
    for run in runs:
        out, _ = run.communicate()
        if run.returncode:
            raise SystemExit(f"{mode} worker failed")
        seconds.append(float(out))
    return max(seconds) / share * 1e6


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        url, mode, first, count, rounds = sys.argv[2:7]
        return worker(url, mode, int(first), int(count), int(rounds))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--work", type=int, default=3000, help="additions per message")
    parser.add_argument("--procs", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    print(work_line(args.work))
    for round_ in range(1, args.rounds + 1):
        for procs in (int(p) for p in args.procs.split(",")):
            cells = [
                f"{mode} {measure(args.url, mode, args.messages, procs, args.work):.0f} µs/message"
                for mode in ("psycopg", "in flight")
            ]
            print(f"round {round_}, {procs} process(es): " + ", ".join(cells))
    with psycopg.connect(args.url, autocommit=True, sslmode="disable") as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    main()
