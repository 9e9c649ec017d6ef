"""What NOTIFY costs PostgreSQL producers: every enqueue of ready messages sends
one (`pg_notify` in its transaction, so waiting drains on any host wake at
commit), and PostgreSQL serializes the commits of notifying transactions on one
lock. Measured as the issue asks, with 4 producers at once:

    .venv/bin/python bench/experiments/postgres_notify.py [--url postgresql://postgres@127.0.0.1:5432]
        [--producers 4] [--messages 2000]

Each producer process enqueues --messages messages one per transaction through
the Python API (mq's own connection: a web request's enqueue), with NOTIFY on
(as shipped) and off, into a fresh database `mqbench_notify`; best of two
interleaved rounds. Prints msgs/s for all producers together.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import mq_cli  # noqa: E402

DATABASE = "mqbench_notify"


def produce(url: str, count: int, notify: bool, start: multiprocessing.synchronize.Event) -> None:
    with mq_cli.connect(database=url) as mq:
        mq.backend.probe()  # connected before the clock starts
        start.wait()
        for n in range(count):
            mq.backend.enqueue("q", [b'{"n": %d}' % n], wake=notify)


def run(base: str, producers: int, count: int, notify: bool) -> float:
    with psycopg.connect(f"{base}/postgres", autocommit=True, sslmode="disable") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    url = f"{base}/{DATABASE}"
    mq_cli.connect(database=url).init()
    start = multiprocessing.Event()
    procs = [
        multiprocessing.Process(target=produce, args=(url, count, notify, start))
        for _ in range(producers)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # all connected
    began = time.perf_counter()
    start.set()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a producer failed (exit {p.exitcode})")
    took = time.perf_counter() - began
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        (stored,) = conn.execute("SELECT COUNT(*) FROM mq_messages").fetchone()  # type: ignore[misc]
    if stored != producers * count:
        raise SystemExit(f"stored {stored}, expected {producers * count}")
    return producers * count / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    best: dict[bool, float] = {}
    for _ in range(2):
        for notify in (True, False):
            rate = run(args.url, args.producers, args.messages, notify)
            best[notify] = max(best.get(notify, 0.0), rate)
    with psycopg.connect(f"{args.url}/postgres", autocommit=True, sslmode="disable") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    print(f"{args.producers} producers x {args.messages} messages, one per transaction")
    print("| NOTIFY | msgs/s |")
    print("| --- | --- |")
    for notify in (True, False):
        print(f"| {'on (as shipped)' if notify else 'off'} | {best[notify]:,.0f} |")
    print(f"\nNOTIFY costs {100 * (1 - best[True] / best[False]):.1f} % of the enqueue rate")


if __name__ == "__main__":
    main()
