"""Does a claim's cost grow with rows it cannot claim now? (issue 21's done-when)

    .venv/bin/python bench/experiments/delayed.py [--rounds 3] [--backends sqlite,mysql,postgres]

On each backend, the whole `mq drain -q q` of 10,000 ready messages (no-op
Python handler, batch 100, one drain, interpreter start included) is timed on
a table that holds nothing else, and on one that also holds 300,000 messages
enqueued with `--delay 1d --priority 5` (higher priority than the ready ones,
not due for a day). Rounds alternate the two; the best of each is kept. The
target: with / without >= 0.8 on every backend. Each backend gets a database
of its own (mqbench_delayed, dropped afterwards; SQLite: a temporary file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
JOBS = ROOT / "bench" / "jobs"
DB = "mqbench_delayed"
READY = 10_000
DELAYED = 300_000
PAYLOAD = '{"n": 1, "pad": "' + "x" * 180 + '"}'
URLS = {
    "mysql": os.environ.get("MQ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306"),
    "postgres": os.environ.get("MQ_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432"),
}


def admin(kind: str, statement: str) -> None:
    if kind == "mysql":
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
        conn.cursor().execute(statement)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(URLS["postgres"] + "/postgres", autocommit=True) as conn:
            conn.execute(statement)


def fresh(kind: str, workdir: Path, name: str) -> Path:
    """A config on an empty database of its own; returns the config's path."""
    if kind == "sqlite":
        url = f"sqlite:///{workdir / (name + '.db')}"
    else:
        quote = "`" if kind == "mysql" else '"'
        admin(kind, f"DROP DATABASE IF EXISTS {quote}{DB}{quote}")
        admin(kind, f"CREATE DATABASE {quote}{DB}{quote}")
        url = f"{URLS[kind]}/{DB}"
    config = workdir / f"{name}.yaml"
    config.write_text(
        f"database: {url}\nlock_dir: {workdir / 'locks'}\n"
        "queues:\n  q: {handler: 'mqbench_jobs:noop', format: json, batch_size: 100}\n"
    )
    mq(config, "init")
    return config


def mq(config: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, MQ_CONFIG=str(config), PYTHONPATH=f"{ROOT}{os.pathsep}{JOBS}")
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli", *args], input=stdin, env=env, capture_output=True
    )
    if done.returncode != 0:
        raise SystemExit(f"mq {' '.join(args)}: exit {done.returncode}: {done.stderr.decode()}")
    return done


def lines(count: int) -> bytes:
    return ((PAYLOAD + "\n") * count).encode()


def measure(kind: str, workdir: Path, delayed: int) -> dict[str, float]:
    config = fresh(kind, workdir, f"{kind}-{delayed}")
    started = time.monotonic()
    if delayed:
        mq(config, "enqueue", "-q", "q", "--lines", "--silent", "--delay", "1d",
           "--priority", "5", stdin=lines(delayed))  # fmt: skip
    mq(config, "enqueue", "-q", "q", "--lines", "--silent", stdin=lines(READY))
    loaded = time.monotonic() - started
    started = time.monotonic()
    report = json.loads(mq(config, "drain", "-q", "q", "--json").stdout)
    wall = time.monotonic() - started
    assert report["succeeded"] == READY, report
    stats = json.loads(mq(config, "stats", "-q", "q", "--json").stdout)["q"]
    assert stats.get("ready", 0) == 0, stats
    return {"rate": READY / wall, "seconds": wall, "load_seconds": loaded}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,mysql,postgres")
    args = parser.parse_args()
    print(f"# bench/experiments/delayed.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")  # fmt: skip
    print("\n| backend | without (msg/s) | with 300k delayed (msg/s) | with / without |")
    print("| --- | --- | --- | --- |")
    worst = None
    with tempfile.TemporaryDirectory(prefix="mq-delayed-") as tmp:
        for kind in args.backends.split(","):
            best = {0: 0.0, DELAYED: 0.0}
            for _ in range(args.rounds):
                for delayed in (0, DELAYED):
                    best[delayed] = max(best[delayed], measure(kind, Path(tmp), delayed)["rate"])
            if kind != "sqlite":
                admin(kind, f"DROP DATABASE IF EXISTS {'`' if kind == 'mysql' else chr(34)}{DB}"
                      f"{'`' if kind == 'mysql' else chr(34)}")  # fmt: skip
            ratio = best[DELAYED] / best[0]
            worst = ratio if worst is None else min(worst, ratio)
            print(f"| {kind} | {best[0]:,.0f} | {best[DELAYED]:,.0f} | {ratio:.2f}x |", flush=True)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}; worst ratio {worst:.2f}x (target >= 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
