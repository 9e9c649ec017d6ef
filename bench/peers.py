"""Peers on the same no-op job: RQ's burst worker (forking and SimpleWorker) and huey's SQLite consumer.

huey runs twice at each worker count: with its default worker type (`-k thread`)
and with worker processes (`-k process`), the model its consumer help and docs
name for CPU-bound work, which a no-op job is (huey's own dequeue and
bookkeeping are all the work there is); greenlets (`-k greenlet`) would gain
nothing, since sqlite3 calls block the whole hub.

Both are timed like mq: from the launch of the worker processes to the moment
the work is done (RQ: the burst workers exit; huey: its consumer never exits
on its own, so the bench polls the pending count and stops it at zero).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    BIN,
    JOBS_DIR,
    PAYLOAD_SIZE,
    _server_pids,
    check_ok,
    cpu_snapshot,
    last_noise,
    log,
    noise,
    python_path,
    run_group,
    stop,
    wait_quiet,
)

RQ_QUEUE = "mqbench"


def _payload() -> dict[str, Any]:
    return {"n": 1, "pad": "x" * (PAYLOAD_SIZE - 20)}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = python_path()
    env.update(extra)
    return env


def rq_redis(url: str) -> Any:
    from redis import Redis

    conn = Redis.from_url(url)
    foreign = [k for k in conn.scan_iter(count=1000) if not k.startswith(b"rq:")]
    if foreign:
        raise RuntimeError(
            f"Redis {url} holds keys that are not RQ's ({foreign[:3]}...): "
            "choose an unused database with --redis-url"
        )
    return conn


def rq_run(url: str, count: int, workers: int, simple: bool) -> dict[str, Any]:
    """``count`` no-op jobs, then ``workers`` `rq worker --burst` processes started together."""
    from rq import Queue

    sys.path.insert(0, str(JOBS_DIR))
    import mqbench_jobs

    conn = rq_redis(url)
    conn.flushdb()  # only RQ keys live here (checked above): leftovers of the last run
    queue = Queue(RQ_QUEUE, connection=conn)
    body = _payload()
    started = time.perf_counter()
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        queue.enqueue_many([Queue.prepare_data(mqbench_jobs.noop, (body,)) for _ in range(n)])
    enqueue_seconds = time.perf_counter() - started
    argv = [str(BIN / "rq"), "worker", "--burst", "--quiet", "--url", url]
    if simple:
        argv += ["--worker-class", "rq.worker.SimpleWorker"]
    argv.append(RQ_QUEUE)
    wall, procs = run_group([argv] * workers, env=_env(), cwd=str(JOBS_DIR))
    check_ok(procs, "rq worker")
    measured_noise = last_noise()
    left = len(queue)
    from rq.registry import FailedJobRegistry, FinishedJobRegistry

    finished = FinishedJobRegistry(queue=queue).count
    failed = FailedJobRegistry(queue=queue).count
    conn.flushdb()
    return {
        "count": count,
        "workers": workers,
        "wall": wall,
        "rate": count / wall,
        "enqueue_rate": count / enqueue_seconds,
        "left": left,
        "finished": finished,
        "failed": failed,
        "ok": left == 0 and failed == 0 and finished == count,
        "noise": measured_noise,
    }


def huey_run(workdir: Path, count: int, workers: int, kind: str = "thread") -> dict[str, Any]:
    """``count`` no-op tasks in a fresh SqliteHuey file, then `huey_consumer -w workers -k kind`."""
    db = workdir / f"huey-{kind}-{workers}.db"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{db}{suffix}"):
            os.remove(f"{db}{suffix}")
    os.environ["MQBENCH_HUEY_DB"] = str(db)
    sys.path.insert(0, str(JOBS_DIR))
    import importlib

    import mqbench_huey

    importlib.reload(mqbench_huey)  # a new file per run
    huey = mqbench_huey.huey
    body = _payload()
    started = time.perf_counter()
    for _ in range(count):
        mqbench_huey.noop(body)
    enqueue_seconds = time.perf_counter() - started
    assert huey.pending_count() == count
    # -q: errors only, or the consumer would log two lines per task into our pipe.
    argv = [str(BIN / "huey_consumer"), "mqbench_huey.huey", "-w", str(workers), "-k", kind, "-q"]
    wait_quiet()
    servers = _server_pids()
    before = cpu_snapshot(servers)
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=_env(MQBENCH_HUEY_DB=str(db)),
        cwd=str(JOBS_DIR),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = started + 600
        while huey.pending_count() > 0:
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"huey consumer stopped or stalled: {proc.stderr.read()!r}")
            time.sleep(0.01)
        wall = time.perf_counter() - started
        measured_noise = noise(before, cpu_snapshot(servers))
    finally:
        stop(proc, signal.SIGINT, 20)
        if proc.stderr:
            proc.stderr.close()
    return {
        "count": count,
        "workers": workers,
        "worker_type": kind,
        "wall": wall,
        "rate": count / wall,
        "enqueue_rate": count / enqueue_seconds,
        "ok": True,
        "noise": measured_noise,
    }


def run_peers(workdir: Path, redis_url: str, sizes: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"rq": [], "rq_simple": [], "huey": [], "huey_process": []}
    for workers in (1, 2, 4):
        for key, simple in (("rq", False), ("rq_simple", True)):
            r = rq_run(redis_url, sizes[key], workers, simple)
            log(f"  {key:9} workers={workers}: {r['rate']:8.0f} jobs/s ({r['count']} jobs)")
            out[key].append(r)
        for key, kind in (("huey", "thread"), ("huey_process", "process")):
            h = huey_run(workdir, sizes["huey"], workers, kind)
            log(f"  {key:12} workers={workers}: {h['rate']:8.0f} tasks/s ({h['count']} tasks)")
            out[key].append(h)
    return out
