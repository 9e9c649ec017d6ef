"""The console on a big table: how long the overview and a filtered queue page take.

    .venv/bin/python bench/web_console.py [--messages 1000000] [--failed 1000]
        [--database sqlite:////tmp/mq-bench-web.db] [--rounds 5]

Fills a fresh table (the database's `mq_bench_web` table; a SQLite file is made
anew) with ``--messages`` ready messages on the queue `bench`, fails the first
``--failed`` of them with a drain (`exec:/bin/false`, max_errors 1), starts a
real `mq web` on a free loopback port (no user: loopback, anonymous) and times
each page ``--rounds`` times over HTTP, printing the median and the slowest in
ms. The goal (issue 36): under 300 ms for the overview and a filtered queue
page with a million messages. A figure, not a test: tests/test_web_browser.py
runs this script on a small table only to see that it works.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

GOAL_MS = 300.0
TABLE = "mq_bench_web"


def fill(url: str, messages: int, failed: int, config: str) -> None:
    import mq_cli
    from mq_cli.core.config import load_config

    mq = mq_cli.MQ(load_config(config, url))
    mq.init()
    started = time.monotonic()
    chunk = 10_000
    for first in range(0, messages, chunk):
        mq.enqueue_many("bench", range(first, min(first + chunk, messages)))
    print(f"filled {messages} messages in {time.monotonic() - started:.1f} s", flush=True)
    if failed:
        mq.drain(queues=["bench"], handler="exec:/bin/false", max_messages=failed)
    print(f"stats: {mq.stats('bench')['bench'].to_json()}", flush=True)
    mq.close()


def timed(url: str, rounds: int) -> tuple[float, float]:
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
            assert response.status == 200
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took), max(took)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--failed", type=int, default=1000)
    parser.add_argument("--database", default="sqlite:////tmp/mq-bench-web.db")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mq-bench-web-")
    config = os.path.join(work, "mq.yaml")
    with open(config, "w") as handle:
        handle.write(f"table: {TABLE}\ndefaults: {{max_errors: 1}}\n")
        handle.write(f"web: {{audit_log: {work}/audit.jsonl}}\n")
    if args.database.startswith("sqlite:///"):
        path = args.database.split(":///", 1)[1]
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    else:
        print("using the table as it is: drop it first for a fresh fill", file=sys.stderr)
    fill(args.database, args.messages, args.failed, config)
    env = {**os.environ, "MQ_CONFIG": config, "MQ_DATABASE_URL": args.database}
    server = subprocess.Popen(
        [sys.executable, "-m", "mq_cli", "web", "--bind", "127.0.0.1:0"],
        env=env, stderr=subprocess.PIPE, cwd=work,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        line = server.stderr.readline().decode()
        found = re.search(r"http://[^ ]+/", line)
        if found is None:
            print(f"mq web did not start: {line}", file=sys.stderr)
            return 1
        base = found.group(0).rstrip("/")
        deep = max(args.messages - 100, 0)
        pages = {
            "overview": "/",
            "filtered queue page (failed)": "/queues/bench?state=failed",
            "filtered queue page (failed, error text)": "/queues/bench?state=failed&error=exit",
            "queue page, deep (ready after id N-100)": f"/queues/bench?state=ready&after={deep}",
            "queue page, a key that matches nothing": "/queues/bench?key=none",
            "GET /api/stats": "/api/stats",
        }
        worst = 0.0
        for name, path in pages.items():
            median, slowest = timed(base + path, args.rounds)
            worst = max(worst, median)
            print(f"{name:45s} median {median:7.1f} ms  slowest {slowest:7.1f} ms", flush=True)
        verdict = "within" if worst <= GOAL_MS else "OVER"
        print(f"{verdict} the {GOAL_MS:.0f} ms goal ({args.messages} messages)")
    finally:
        server.terminate()
        server.communicate(timeout=60)
        shutil.rmtree(work, ignore_errors=True)  # its config and audit log only
    return 0


if __name__ == "__main__":
    sys.exit(main())
