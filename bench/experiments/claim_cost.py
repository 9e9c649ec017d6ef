"""The cost of one claim, in process: mq's own `Backend.claim` of 100 on MariaDB and
PostgreSQL, for each git revision given, interleaved (the machine is shared).

    .venv/bin/python bench/experiments/claim_cost.py REV [REV ...] [--rounds 6] [--messages 20000]

Each revision's mq_cli is read with `git archive` (which changes nothing) into a
temporary directory and runs in a child process of its own. A round loads the
ready rows (not timed), then claims 100 at a time (only the claim is timed:
its transaction, commit included) and deletes each batch with one statement,
until the queue is empty. Prints ms per claim per revision and database: the
median and the best of the rounds. The databases `mqbench_claim` are dropped
and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
URLS = {
    "MariaDB": "mysql://root@127.0.0.1:3306/mqbench_claim",
    "PostgreSQL": "postgresql://postgres@127.0.0.1:5432/mqbench_claim",
}


def child(url: str, messages: int) -> None:
    """One round against ``url`` with the mq_cli on PYTHONPATH: prints ms per claim."""
    from mq_cli.backends import open_backend
    from mq_cli.core.dburl import parse_database_url

    with open_backend(parse_database_url(url), "mq_messages", create=True) as backend:
        payload = b'{"n": 1, "pad": "' + b"x" * 180 + b'"}'
        for _ in range(0, messages, 1000):
            backend.enqueue("q", [payload] * 1000)
        spent, claims = 0.0, 0
        while True:
            started = time.perf_counter()
            batch = backend.claim("q", 100, "bench")
            spent += time.perf_counter() - started
            if not batch:
                break
            claims += 1
            backend.ack_success_many([m.id for m in batch], "bench")
    print(f"{spent / claims * 1000:.4f}")


def recreate(kind: str) -> None:
    if kind == "MariaDB":
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", user="root", autocommit=True, ssl_disabled=True)
        with conn.cursor() as cursor:
            cursor.execute("DROP DATABASE IF EXISTS mqbench_claim")
            cursor.execute("CREATE DATABASE mqbench_claim")
        conn.close()
        return
    import psycopg

    url = URLS[kind].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        conn.execute("DROP DATABASE IF EXISTS mqbench_claim WITH (FORCE)")
        conn.execute("CREATE DATABASE mqbench_claim")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="+", metavar="REV")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mq-claim-cost-"))
    trees = {}
    for rev in args.revisions:
        tree = work / rev
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "mq_cli"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        trees[rev] = tree
    figures: dict[tuple[str, str], list[float]] = {}
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    for _ in range(args.rounds):
        for kind, url in URLS.items():
            for rev, tree in trees.items():
                recreate(kind)
                env = dict(os.environ, PYTHONPATH=str(tree))
                out = subprocess.run(
                    [sys.executable, __file__, "--child", url, str(args.messages)],
                    env=env, capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                figures.setdefault((kind, rev), []).append(float(out))
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)
    print("| database | revision | ms per claim of 100, median | best | rounds |")
    print("| --- | --- | --- | --- | --- |")
    for (kind, rev), values in figures.items():
        print(f"| {kind} | {rev} | {statistics.median(values):.3f} | {min(values):.3f} | "
              f"{len(values)} |")  # fmt: skip
    for kind in URLS:
        recreate(kind)


if __name__ == "__main__":
    main()
