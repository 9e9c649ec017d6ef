"""Enqueue-to-start latency of `mq drain --wait`, with and without the wake-up.

    .venv/bin/python bench/experiments/latency.py [--messages 200] [--gap 0.01-0.06] [--mysql-url URL]
        [--pg-url URL] [--backends sqlite,mysql,postgres]

For each backend (SQLite in a temporary directory; MariaDB and PostgreSQL in a
database `mqbench_latency`, dropped and made again), one `mq drain -q lat --wait` runs
while this process enqueues messages one at a time through the Python API
(mq's own connection, as an application does), --gap seconds apart (a random
pause in that range: 10-60 ms by default; 0.3-0.8 s shows sparse traffic, where
a polling drain has backed off to its once-a-second poll). The handler
records when it started; the latency of a message is that moment minus the
moment its enqueue call returned (committed). Two modes:

- ``wake``: as shipped: the producer wakes the waiting drain (a FIFO in the
  lock directory);
- ``listen`` (PostgreSQL): the FIFO made impossible, so only LISTEN/NOTIFY
  wakes the drain, as for a producer on another host;
- ``poll``: the wake-up made impossible (the FIFO directory is taken by a
  file; on PostgreSQL the producer sends no NOTIFY), so the drain polls, at
  most once a second when idle.

Prints p50, p99 and max in milliseconds, as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))

import mq_cli.backends  # noqa: E402 - also registers the dialects load_config reads
from mq_cli.core.config import load_config  # noqa: E402
from mq_cli.host.slots import open_database_dir  # noqa: E402

HANDLER = """
import json, os, time
from mq_cli.runners.handlers import current_message

def run(payload):
    with open(os.environ["LAT_LOG"], "a") as out:
        out.write(json.dumps({"id": current_message().id, "t": time.time()}) + "\\n")
"""


def measure(url: str, work: Path, mode: str, count: int, gap: tuple[float, float]) -> list[float]:
    locks = work / f"locks-{mode}"
    locks.mkdir(mode=0o700)
    config = work / f"mq-{mode}.yaml"
    notify = "false" if mode == "poll" else "true"
    config.write_text(
        f"database: {url}\nlock_dir: {locks}\n"
        f"queues:\n  lat: {{handler: 'mqlat:run', notify: {notify}}}\n"
    )
    if mode in ("poll", "listen"):
        # A file where the database's FIFOs go (mq_cli/host/wakeup.py): none can be made.
        Path(open_database_dir(load_config(str(config))), "wake").write_text("")
    log = work / f"lat-{mode}.jsonl"
    env = dict(
        os.environ, PYTHONPATH=f"{work.parent}:{ROOT}", LAT_LOG=str(log), MQ_CONFIG=str(config)
    )
    mq = [sys.executable, "-m", "mq_cli"]
    subprocess.run([*mq, "init"], env=env, check=True, capture_output=True)
    drain = subprocess.Popen(
        [*mq, "drain", "-q", "lat", "--wait", "--max-seconds", "600"],
        env=env,
        stderr=subprocess.DEVNULL,  # its goodbye on SIGTERM
    )
    committed: dict[int, float] = {}
    rng = random.Random(1)
    try:
        time.sleep(2.0)  # the drain is up and idle
        with mq_cli.connect(config=str(config)) as producer:
            for n in range(count):
                time.sleep(rng.uniform(*gap))
                ident = producer.enqueue("lat", {"n": n})
                committed[int(ident)] = time.time()  # type: ignore[arg-type]
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if log.exists() and len(log.read_text().splitlines()) >= count:
                break
            time.sleep(0.05)
    finally:
        drain.terminate()
        drain.wait(timeout=60)
    started = {r["id"]: r["t"] for r in map(json.loads, log.read_text().splitlines())}
    return [max(started[i] - t, 0.0) * 1000 for i, t in committed.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--gap", default="0.01-0.06", help="seconds between enqueues: LOW-HIGH")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--backends", default="sqlite,mysql,postgres")
    args = parser.parse_args()
    low, _, high = args.gap.partition("-")
    gap = (float(low), float(high or low))
    work = Path(tempfile.mkdtemp(prefix="mq-bench-latency-"))
    (work / "mqlat.py").write_text(HANDLER)
    print(f"{args.messages} messages, one at a time, {args.gap} s apart; latency in ms")
    print("| backend | mode | p50 | p99 | max |")
    print("| --- | --- | --- | --- | --- |")
    import pymysql

    admin = pymysql.connect(host="127.0.0.1", user="root", autocommit=True, ssl_disabled=True)
    for backend in args.backends.split(","):
        for mode in ("wake", "listen", "poll") if backend == "postgres" else ("wake", "poll"):
            if backend == "sqlite":
                url = f"sqlite:///{work}/lat-{mode}.db"
            elif backend == "postgres":
                import psycopg

                with psycopg.connect(
                    f"{args.pg_url}/postgres", autocommit=True, sslmode="disable"
                ) as pg:
                    pg.execute("DROP DATABASE IF EXISTS mqbench_latency WITH (FORCE)")
                    pg.execute("CREATE DATABASE mqbench_latency")
                url = f"{args.pg_url}/mqbench_latency"
            else:
                with admin.cursor() as cursor:
                    cursor.execute("DROP DATABASE IF EXISTS mqbench_latency")
                    cursor.execute("CREATE DATABASE mqbench_latency")
                url = f"{args.mysql_url}/mqbench_latency"
            (work / backend).mkdir(exist_ok=True)
            got = sorted(measure(url, work / backend, mode, args.messages, gap))
            p99 = got[min(len(got) - 1, int(len(got) * 0.99))]
            print(
                f"| {backend} | {mode} | {statistics.median(got):.1f} | {p99:.1f} | {got[-1]:.1f} |",
                flush=True,
            )
    admin.close()


if __name__ == "__main__":
    main()
