"""The console on a big table: how long each page and API call takes, on any backend.

    .venv/bin/python bench/web_console.py [--messages 1000000] [--failed 100]
        [--database sqlite:////tmp/mq-bench-web.db] [--rounds 7] [--keep] [--drop]
        [--only overview,stats]

Fills mq's table `mq_bench_web` (dropped first, with its companions) with
``--messages`` rows in a realistic mix of queues and states (bench/web_fill.py:
set-based SQL, 10M rows in minutes), fails ``--failed`` more with a real drain
(`exec:/bin/false`, max_errors 1, so the run log has runs), starts a real `mq
web` on a free loopback port (no user: loopback, anonymous) and times every
page and API call ``--rounds`` times over HTTP, printing the median and the
slowest in ms. ``--keep`` times the table as it is when it already holds
``--messages`` rows (no fill); ``--drop`` drops it at the end.

The goal (issue 49): every page and call within 300 ms with 1M messages, the
overview within 1 s with 10M. A figure, not a test: tests/test_web_browser.py
runs this script on a small table only to see that it works.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import web_fill  # noqa: E402

GOAL_MS = 300.0
OVERVIEW_GOAL_MS = 1000.0  # the overview's, above 1M messages
TABLE = "mq_bench_web"


def prepare(url: str, messages: int, failed: int, config: str, keep: bool) -> None:
    import mq_cli
    from mq_cli.core.config import load_config

    print(f"mq from {os.path.dirname(mq_cli.__file__)}", flush=True)
    held = web_fill.count(url, TABLE) if keep else -1
    mq = mq_cli.MQ(load_config(config, url))
    if held < messages * 0.99:  # a drain purges expired tombstones
        if url.startswith("sqlite:///"):
            path = url.split(":///", 1)[1]
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
        else:
            web_fill.drop(url, TABLE)
        mq.init()
        web_fill.fill(url, TABLE, messages)
        if failed:
            mq.enqueue_many("bench", range(failed))
            import contextlib
            import io

            with contextlib.redirect_stderr(io.StringIO()):  # a line per failure
                mq.drain(queues=["bench"], handler="exec:/bin/false", max_messages=failed)
    else:
        print(f"timing the table as it is ({held} rows)", flush=True)
    started = time.monotonic()
    stats = {name: s.to_json() for name, s in mq.stats().items()}
    took = time.monotonic() - started
    print(f"mq stats ({took * 1000:.0f} ms): {json.dumps(stats)}", flush=True)
    mq.close()


def timed(url: str, rounds: int) -> tuple[float, float]:
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=300) as response:
            response.read()
            assert response.status == 200
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took), max(took)


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=300) as response:
        return json.loads(response.read())


def pages(base: str, messages: int) -> dict[str, str]:
    listing = get_json(f"{base}/api/messages?queue=bench&state=failed&limit=1")
    assert isinstance(listing, list)
    one = listing[0]["id"] if listing else 1
    deep = max(messages - 1000, 0)
    return {
        "overview": "/",
        "overview, refresh (fragment)": "/?fragment=1",
        "queue page": "/queues/bench",
        "queue page, refresh (fragment)": "/queues/bench?fragment=1",
        "filtered queue page (ready)": "/queues/bench?state=ready",
        "filtered queue page (delayed)": "/queues/bench?state=delayed",
        "filtered queue page (processing)": "/queues/bench?state=processing",
        "filtered queue page (stalled)": "/queues/bench?state=stalled",
        "filtered queue page (failed)": "/queues/bench?state=failed",
        "filtered queue page (failed, error text)": "/queues/bench?state=failed&error=boom+3",
        "queue page, deep (failed after id N-1000)": f"/queues/bench?state=failed&after={deep}",
        "queue page, a key that matches nothing": "/queues/bench?key=none",
        "queue page, small queue": "/queues/reports?state=failed",
        "message page": f"/messages/{one}",
        "confirm page, retry failed": "/queues/bench/confirm?action=retry&scope=matching&state=failed",
        "confirm page, delete ready": "/queues/bench/confirm?action=delete&scope=matching&state=ready",
        "confirm page, delete all (empty filter)": "/queues/bench/confirm?action=delete&scope=matching",
        "confirm page, retry failed with error text": (
            "/queues/bench/confirm?action=retry&scope=matching&state=failed&error=boom+3"
        ),
        "confirm page, purge ready": "/queues/bench/confirm?action=purge&status=ready",
        "confirm page, purge (every state)": "/queues/bench/confirm?action=purge",
        "confirm page, requeue failed": "/queues/bench/confirm?action=requeue-failed",
        "confirm page, requeue stalled": "/queues/bench/confirm?action=requeue-stalled",
        "failures page (grouped by error)": "/queues/bench/failures",
        "search page (error text)": "/search?q=boom+3",
        "search page (id)": f"/search?q={one}",
        "search page (unique key)": "/search?q=k50",
        "GET /api/failures": "/api/failures?queue=bench",
        "GET /api/search": "/api/search?q=boom",
        "runs page": "/runs",
        "actions page": "/actions",
        "GET /api/stats": "/api/stats",
        "GET /api/stats?queue=bench": "/api/stats?queue=bench",
        "GET /api/status": "/api/status",
        "GET /api/messages (queue, state failed)": "/api/messages?queue=bench&state=failed",
        "GET /api/messages (every queue)": "/api/messages",
        "GET /api/messages (filter, after)": f"/api/messages?queue=bench&error=boom&after={deep}",
        "GET /api/messages/ID": f"/api/messages/{one}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--failed", type=int, default=100)
    parser.add_argument("--database", default="sqlite:////tmp/mq-bench-web.db")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="reuse a table of this size")
    parser.add_argument("--drop", action="store_true", help="drop the table at the end")
    parser.add_argument("--only", default="", help="time the pages whose name has one of "
                        "these comma-separated words (default: all)")  # fmt: skip
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mq-bench-web-")
    config = os.path.join(work, "mq.yaml")
    with open(config, "w") as handle:
        handle.write(f"table: {TABLE}\ndefaults: {{max_errors: 1}}\n")
        handle.write(f"web: {{audit_log: {work}/audit.jsonl}}\n")
    prepare(args.database, args.messages, args.failed, config, args.keep)
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
        over = []
        load = os.getloadavg()[0]
        words = [w for w in args.only.split(",") if w]
        for name, path in pages(base, args.messages).items():
            if words and not any(w in name for w in words):
                continue
            median, slowest = timed(base + path, args.rounds)
            goal = OVERVIEW_GOAL_MS if args.messages > 1_000_000 else GOAL_MS
            if median > (goal if name.startswith("overview") else GOAL_MS):
                over.append(name)
            print(f"{name:45s} median {median:7.1f} ms  slowest {slowest:7.1f} ms", flush=True)
        print(f"load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        if over:
            print(f"OVER the goal ({args.messages} messages): {', '.join(over)}")
        else:
            print(f"within the goal ({args.messages} messages)")
    finally:
        server.terminate()
        server.communicate(timeout=60)
        shutil.rmtree(work, ignore_errors=True)  # its config and audit log only
        if args.drop:
            if args.database.startswith("sqlite:///"):
                path = args.database.split(":///", 1)[1]
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(path + suffix):
                        os.unlink(path + suffix)
            else:
                web_fill.drop(args.database, TABLE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
