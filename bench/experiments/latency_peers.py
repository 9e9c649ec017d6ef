"""Enqueue-to-start latency of peer job queues, measured as bench/experiments/latency.py measures mq.

    .venv/bin/python bench/experiments/latency_peers.py [--messages 200] [--gap 0.01-0.06]
        [--systems rq,huey,procrastinate,pgqueuer] [--redis-url URL] [--pg-url URL]
        [--bench-venv bench/.venv] [--peers-venv bench/peers-venv]

For each peer, one worker process runs, idle, waiting for work; then a
producer enqueues messages one at a time through the peer's Python API,
--gap seconds apart (a random pause in that range, the same seeded sequence as
latency.py). The job records when it started; the latency of a message is that
moment minus the moment its enqueue call returned, as the producer saw it. The
producer and the worker run in the peer's own venv (RQ and huey in bench/.venv,
made with `pip install rq huey redis` when missing; procrastinate and pgqueuer
in bench/peers-venv, as bench/postgres.py makes it): they never become
dependencies of mq. Each worker is set up as its docs have it, and wakes so:

- ``rq``: `rq worker` (forks a work horse per job) and `rq worker --worker-class
  rq.worker.SimpleWorker` (runs the job in the worker); both block on the
  queue's list in Redis (BLMOVE into their intermediate queue; BLPOP before
  Redis 6.2), in database 15 by default, which must hold nothing but RQ's keys;
- ``huey``: `huey_consumer` (one worker thread) on a SqliteHuey file, which
  polls: by default every 0.1 s after a task, backing off x1.15 per empty poll
  up to 10 s; and with `-d 0.01 -m 0.01`, every 0.01 s; then on a RedisHuey
  (same Redis database, keys huey.*.mqbench_lat), which blocks in BRPOP;
- ``procrastinate``: `procrastinate worker` with LISTEN/NOTIFY on (its
  default; it polls every 5 s besides), database mqbench_lat_procrastinate;
- ``pgqueuer``: `pgqueuer.run(factory)` over asyncpg, which is `pgq run`
  without its CLI (pgqueuer 1.6's fails in its log level setup: AttributeError:
  'str' object has no attribute 'name'), its defaults (it LISTENs; dequeue
  timeout 30 s), database mqbench_lat_pgqueuer.

Databases are dropped and made again, and dropped after; Redis keys are
deleted after. Prints p50, p99 and max in milliseconds, as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT / "bench"))

from common import stop  # noqa: E402
from postgres import ensure_peers, ensure_venv  # noqa: E402

BENCH_PACKAGES = ("rq", "huey", "redis")

# Modules written to the temporary directory (on the PYTHONPATH of the peers' processes).
# Each lat_* module holds the job, `setup()`, `cleanup()` and the producer `produce()`.
COMMON = '''
import json, os, random, time

def started(n):
    with open(os.environ["LAT_LOG"], "a") as out:
        out.write(json.dumps({"id": n, "t": time.time()}) + "\\n")

def gaps():
    rng = random.Random(1)
    low, high = float(os.environ["LAT_LOW"]), float(os.environ["LAT_HIGH"])
    return [rng.uniform(low, high) for _ in range(int(os.environ["LAT_COUNT"]))]

def report(committed):
    """One line per message on stdout: its number, and when its enqueue call returned."""
    print("\\n".join(f"{n} {t!r}" for n, t in committed))

def produce(enqueue):
    committed = []
    for n, gap in enumerate(gaps()):
        time.sleep(gap)
        enqueue(n)
        committed.append((n, time.time()))
    report(committed)

async def aproduce(enqueue):
    import asyncio

    committed = []
    for n, gap in enumerate(gaps()):
        await asyncio.sleep(gap)
        await enqueue(n)
        committed.append((n, time.time()))
    report(committed)

def redis_conn():
    from redis import Redis

    return Redis.from_url(os.environ["LAT_REDIS_URL"])

def redis_guard():
    """As bench/peers.py: only RQ's keys (and this bench's huey keys) may be there."""
    foreign = [k for k in redis_conn().scan_iter(count=1000)
               if not k.startswith(b"rq:") and b"mqbench_lat" not in k]
    if foreign:
        raise SystemExit(f"Redis {os.environ['LAT_REDIS_URL']} holds keys that are not RQ's "
                         f"({foreign[:3]}...): choose an unused database with --redis-url")

def redis_delete(pattern):
    conn = redis_conn()
    for key in list(conn.scan_iter(match=pattern, count=1000)):
        conn.delete(key)
'''

RQ = """
from rq import Queue
from latcommon import produce, redis_conn, redis_delete, redis_guard, started

def setup():
    redis_guard()

def cleanup():
    redis_delete("rq:*")

def main():
    queue = Queue("lat", connection=redis_conn())
    produce(lambda n: queue.enqueue(started, n))
"""

HUEY = """
import os
from huey import RedisHuey, SqliteHuey
import latcommon

if os.environ["LAT_HUEY"] == "redis":
    huey = RedisHuey("mqbench_lat", url=os.environ["LAT_REDIS_URL"])  # blocking=True: BRPOP
else:
    huey = SqliteHuey("mqbench_lat", filename=os.environ["LAT_HUEY_DB"])

@huey.task()
def started(n):
    latcommon.started(n)

def setup():
    if os.environ["LAT_HUEY"] == "redis":
        latcommon.redis_guard()

def cleanup():
    if os.environ["LAT_HUEY"] == "redis":
        latcommon.redis_delete("huey.*mqbench_lat*")

def main():
    latcommon.produce(started)
"""

PROCRASTINATE = """
import os
from procrastinate import App, PsycopgConnector
import latcommon

app = App(connector=PsycopgConnector(conninfo=os.environ["LAT_PG_URL"]))

@app.task(name="lat")
def started(n):
    latcommon.started(n)

def setup():
    with app.open():
        app.schema_manager.apply_schema()

def cleanup():
    pass

def main():
    with app.open():
        latcommon.produce(lambda n: started.defer(n=n))
"""

PGQUEUER = """
import asyncio, os
from contextlib import asynccontextmanager
import asyncpg
import pgqueuer
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job
import latcommon

@asynccontextmanager
async def worker():  # the factory `pgq run` takes
    conn = await asyncpg.connect(os.environ["LAT_PG_URL"])
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("lat")
    async def started(job: Job) -> None:
        latcommon.started(int(job.payload))

    try:
        yield pgq
    finally:
        await conn.close()

def run():  # `pgq run lat_pgqueuer:worker` without the CLI
    asyncio.run(pgqueuer.run("lat_pgqueuer:worker"))

async def with_queries(work):
    conn = await asyncpg.connect(os.environ["LAT_PG_URL"])
    try:
        await work(Queries(AsyncpgDriver(conn)))
    finally:
        await conn.close()

async def produce(queries):
    await latcommon.aproduce(lambda n: queries.enqueue("lat", str(n).encode()))

def setup():
    asyncio.run(with_queries(lambda queries: queries.install()))

def cleanup():
    pass

def main():
    asyncio.run(with_queries(produce))
"""

MODULES = {"latcommon": COMMON, "lat_rq": RQ, "lat_huey": HUEY,
           "lat_procrastinate": PROCRASTINATE, "lat_pgqueuer": PGQUEUER}  # fmt: skip


def peers(redis_url: str) -> list[dict]:
    """The rows: key (for --systems), system, mode, venv, module, worker argv, env, database."""
    rq = ["rq", "worker", "--url", redis_url, "lat"]
    huey = ["huey_consumer", "lat_huey.huey"]
    return [
        dict(key="rq", system="RQ", mode="BLMOVE, `rq worker` (fork per job)",
             venv="bench", module="lat_rq", worker=rq),
        dict(key="rq-simple", system="RQ", mode="BLMOVE, SimpleWorker (no fork)",
             venv="bench", module="lat_rq",
             worker=[*rq[:-1], "--worker-class", "rq.worker.SimpleWorker", "lat"]),
        dict(key="huey-sqlite", system="huey, SQLite",
             mode="poll 0.1 s, x1.15 per empty poll to 10 s (default)",
             venv="bench", module="lat_huey", worker=huey, env={"LAT_HUEY": "sqlite"}),
        dict(key="huey-sqlite-fast", system="huey, SQLite", mode="poll 0.01 s (-d 0.01 -m 0.01)",
             venv="bench", module="lat_huey", worker=[*huey, "-d", "0.01", "-m", "0.01"],
             env={"LAT_HUEY": "sqlite"}),
        dict(key="huey-redis", system="huey, Redis", mode="BRPOP (blocking, default)",
             venv="bench", module="lat_huey", worker=huey, env={"LAT_HUEY": "redis"}),
        dict(key="procrastinate", system="procrastinate", mode="LISTEN",
             venv="peers", module="lat_procrastinate",
             worker=["procrastinate", "--app=lat_procrastinate.app", "worker"],
             database="mqbench_lat_procrastinate"),
        dict(key="pgqueuer", system="pgqueuer, asyncpg", mode="LISTEN",
             venv="peers", module="lat_pgqueuer",
             worker=["python", "-c", "import lat_pgqueuer as m; m.run()"],
             database="mqbench_lat_pgqueuer"),
    ]  # fmt: skip


def ensure_bench_venv(venv: Path) -> None:
    """RQ and huey's venv: bench/run makes it (with mq and more); enough of it when missing."""
    ensure_venv(venv, BENCH_PACKAGES, "huey, redis, rq")


def pg_database(pg_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{pg_url}/postgres", autocommit=True, sslmode="disable") as pg:
        pg.execute(statement)


def measure(
    peer: dict, venv: Path, work: Path, env: dict[str, str], count: int, gap: tuple[float, float]
) -> list[float]:
    log = work / "lat.jsonl"
    env = dict(env, LAT_LOG=str(log), LAT_COUNT=str(count), LAT_LOW=str(gap[0]),
               LAT_HIGH=str(gap[1]), LAT_HUEY_DB=str(work / "huey.db"))  # fmt: skip
    env.update(peer.get("env", {}))
    python = str(venv / "bin" / "python")

    def call(function: str) -> str:
        code = f"import {peer['module']} as m; m.{function}()"
        done = subprocess.run(
            [python, "-c", code], env=env, cwd=work, capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(
                f"{peer['key']}: {function}() exited {done.returncode}:\n{done.stderr}"
            )
        return done.stdout

    worker_log = work / "worker.log"
    committed: dict[int, float] = {}
    call("setup")
    try:
        with worker_log.open("w") as out:
            worker = subprocess.Popen(
                [str(venv / "bin" / peer["worker"][0]), *peer["worker"][1:]],
                env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            time.sleep(2.0)  # the worker is up and idle
            for line in call("main").splitlines():
                n, t = line.split()
                committed[int(n)] = float(t)
            end = time.monotonic() + 30
            while time.monotonic() < end and worker.poll() is None:
                if log.exists() and len(log.read_text().splitlines()) >= count:
                    break
                time.sleep(0.05)
        finally:
            stop(worker, signal.SIGTERM, 60)
    finally:
        call("cleanup")
    lines = log.read_text().splitlines() if log.exists() else []
    started = {r["id"]: r["t"] for r in map(json.loads, lines)}
    if len(started) < count:
        tail = worker_log.read_text()[-3000:]
        raise SystemExit(f"{peer['key']}: {len(started)} of {count} jobs ran; worker:\n{tail}")
    return [max(started[i] - t, 0.0) * 1000 for i, t in committed.items()]


def versions(venv: Path, packages: list[str]) -> str:
    code = "import importlib.metadata as m, sys; print(*(m.version(p) for p in sys.argv[1:]))"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code, *packages],
                         check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    return ", ".join(f"{p} {v}" for p, v in zip(packages, out, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--gap", default="0.01-0.06", help="seconds between enqueues: LOW-HIGH")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--bench-venv", type=Path, default=ROOT / "bench" / ".venv")
    parser.add_argument("--peers-venv", type=Path, default=ROOT / "bench" / "peers-venv")
    parser.add_argument("--systems", default="rq,huey,procrastinate,pgqueuer",
                        help="comma-separated: rq, rq-simple, huey, huey-sqlite, "
                        "huey-sqlite-fast, huey-redis, procrastinate, pgqueuer")  # fmt: skip
    args = parser.parse_args()
    low, _, high = args.gap.partition("-")
    gap = (float(low), float(high or low))
    wanted = args.systems.split(",")
    rows = [p for p in peers(args.redis_url)
            if any(p["key"] == w or p["key"].startswith(w + "-") for w in wanted)]  # fmt: skip
    venvs = {"bench": args.bench_venv.absolute(), "peers": args.peers_venv.absolute()}
    if any(p["venv"] == "bench" for p in rows):
        ensure_bench_venv(venvs["bench"])
        print(versions(venvs["bench"], ["rq", "huey", "redis"]), file=sys.stderr)
    if any(p["venv"] == "peers" for p in rows):
        ensure_peers(venvs["peers"])
        print(versions(venvs["peers"], ["procrastinate", "pgqueuer", "asyncpg", "psycopg"]),
              file=sys.stderr)  # fmt: skip

    work = Path(tempfile.mkdtemp(prefix="mq-bench-latency-peers-"))
    for name, source in MODULES.items():
        (work / f"{name}.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=str(work), LAT_REDIS_URL=args.redis_url)
    print(f"{args.messages} messages, one at a time, {args.gap} s apart; latency in ms")
    print("| system | mode | p50 | p99 | max |")
    print("| --- | --- | --- | --- | --- |")
    try:
        for peer in rows:
            database = peer.get("database")
            if database:
                pg_database(args.pg_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
                pg_database(args.pg_url, f"CREATE DATABASE {database}")
                env["LAT_PG_URL"] = f"{args.pg_url}/{database}?sslmode=disable"
            (work / peer["key"]).mkdir()
            try:
                got = sorted(measure(peer, venvs[peer["venv"]], work / peer["key"], env,
                                     args.messages, gap))  # fmt: skip
            finally:
                if database:
                    pg_database(args.pg_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            p99 = got[min(len(got) - 1, int(len(got) * 0.99))]
            print(
                f"| {peer['system']} | {peer['mode']} | {statistics.median(got):.1f} "
                f"| {p99:.1f} | {got[-1]:.1f} |",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
