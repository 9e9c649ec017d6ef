"""The cost of the fleet limits: drain throughput with `max_drains`, and with a
`rate_limit` far above the drain's speed, against neither (target: <= 5 % slower).

Not part of `bench/run` (like postgres.py): ``python bench/experiments/limits.py [--quick]``
with the project's virtualenv. For each database (SQLite in a temporary
directory, MariaDB at $MQ_BENCH_MYSQL_URL, default
mysql://root@127.0.0.1:3306/mqbench_limits, dropped and recreated) and each
batch size and process count, it drains N ready messages of a no-op Python
handler with each of three configs, rounds interleaved so that drift on a shared
machine hits all three alike, and prints the median msg/s per config and the
ratios, with `uptime`'s load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
MQ = [sys.executable, "-m", "mq_cli"]
QUEUE = "bench"
CONFIGS = {
    "neither": {},
    "max_drains": {"max_drains": 8},
    "rate_limit": {"rate_limit": "1000000/s"},
}


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "bench" / "jobs")])
    return {**os.environ, "PYTHONPATH": path}


def write_configs(workdir: Path, url: str) -> dict[str, Path]:
    paths = {}
    for name, extra in CONFIGS.items():
        queue = {"handler": "mqbench_jobs:noop", "concurrency": 8, **extra}
        config = {"database": url, "lock_dir": str(workdir / "locks"), "queues": {QUEUE: queue}}
        paths[name] = workdir / f"{name}.yaml"
        paths[name].write_text(json.dumps(config))
    return paths


def mq(config: Path, *args: str, stdin: bytes | None = None) -> None:
    subprocess.run([*MQ, "-c", str(config), *args], input=stdin, env=env(), check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def drain(config: Path, count: int, batch: int, processes: int) -> float:
    lines = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * 180) for i in range(count))
    mq(config, "enqueue", "-q", QUEUE, "--lines", "--silent", stdin=lines)
    argv = [*MQ, "-c", str(config), "drain", "-q", QUEUE, "--batch-size", str(batch), "--json"]
    began = time.monotonic()
    procs = [subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE) for _ in range(processes)]
    done = 0
    for proc in procs:
        out, _ = proc.communicate()
        assert proc.returncode == 0
        done += json.loads(out)["succeeded"]
    wall = time.monotonic() - began
    assert done == count, f"drained {done} of {count}"
    return count / wall


def mysql_reset(url: str) -> None:
    import pymysql

    import mq_cli.backends  # noqa: F401 - registers the dialects whose URLs parse
    from mq_cli.core.dburl import parse_database_url

    s = parse_database_url(url)
    assert s.database and s.database.startswith("mqbench")
    conn = pymysql.connect(host=s.host, port=s.port, user=s.user or "root",
                           password=s.password or "", ssl_disabled=True)  # fmt: skip
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{s.database}`")
        cursor.execute(f"CREATE DATABASE `{s.database}`")
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages and rounds")
    parser.add_argument("--backend", action="append", choices=["sqlite", "mysql"])
    args = parser.parse_args()
    count, rounds = (2000, 2) if args.quick else (5000, 3)
    print(f"load before: {load()}")
    mysql_url = os.environ.get("MQ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mqbench_limits")
    with tempfile.TemporaryDirectory(prefix="mq-bench-limits-") as tmp:
        for kind in args.backend or ["sqlite", "mysql"]:
            workdir = Path(tmp) / kind
            workdir.mkdir()
            if kind == "mysql":
                mysql_reset(mysql_url)
                url = mysql_url
            else:
                url = f"sqlite:///{workdir}/mq.db"
            configs = write_configs(workdir, url)
            mq(configs["neither"], "init")
            for batch, processes in ((10, 1), (100, 1), (10, 4), (100, 4)):
                rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
                for _ in range(rounds):
                    for name, config in configs.items():
                        rates[name].append(drain(config, count, batch, processes))
                medians = {name: statistics.median(r) for name, r in rates.items()}
                base = medians["neither"]
                print(f"{kind:6} batch {batch:3} x {processes} proc: " + "  ".join(
                    f"{name} {m:6.0f} msg/s ({m / base:.2f}x)" for name, m in medians.items()
                ))  # fmt: skip
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
