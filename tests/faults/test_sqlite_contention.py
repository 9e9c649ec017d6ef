"""SQLite under contention: 4 drains and 2 enqueuers (real processes) on one
file. No `database is locked` reaches the user; nothing is lost or run twice."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import Db
from tests.faults.harness import crontab
from tests.faults.scenario import Scenario

# serial: a long scenario whose timing is under test; it runs alone (tests/run.sh).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SECONDS = 25
HANG = 300
BATCH_LINES = 100
WORK = {"sleep": 0.01, "fail": 0.05}


def test_four_drains_two_enqueuers_on_one_sqlite_file(tmp_path):
    db = Db("sqlite", f"sqlite:///{tmp_path}/mq.db", tmp_path)
    assert db.run("init").exit_code == 0
    s = Scenario(tmp_path, db.url, db.sql, {"alpha": {}}, db.env())
    problems: list[str] = []
    batches = 0
    stop = threading.Event()

    def enqueuer(name: str) -> None:
        nonlocal batches
        n = 0
        while not stop.is_set():
            keys = [f"{name}-{n + i}" for i in range(BATCH_LINES)]
            n += BATCH_LINES
            lines = "".join(json.dumps({"k": k, **WORK}) + "\n" for k in keys)
            result = subprocess.run(
                [sys.executable, "-m", "mq_cli", "enqueue", "-q", "alpha", "--lines"],
                input=lines.encode(), capture_output=True, cwd=tmp_path, env=s.env,
                timeout=120, check=False,
            )  # fmt: skip
            if result.returncode != 0 or result.stderr:
                problems.append(f"enqueue exited {result.returncode}: {result.stderr[-500:]!r}")
                return
            ids = [int(x) for x in result.stdout.split()]
            assert len(ids) == len(keys)
            with s.lock:
                batches += 1
                for i, k in zip(ids, keys, strict=True):
                    s.keys[i] = k
                    s.enqueued[k] = "alpha"
            time.sleep(random.uniform(0, 0.3))

    producers = [threading.Thread(target=enqueuer, args=(f"p{i}",)) for i in range(2)]
    cron = crontab(
        s.fleet,
        [("main", "alpha")],
        ["--max-seconds", "5", "--wait", "--concurrency", "4"],
        every=0.3,
        rng=random.Random(42),
        max_alive=4,
    )
    try:
        for p in producers:
            p.start()
        cron.start()
        # At least SECONDS, and until 1,000 messages went in while drains ran: a
        # loaded machine takes longer to get there, which is no fault (only a hang
        # fails: HANG seconds).
        started = time.monotonic()
        while time.monotonic() - started < HANG and (
            time.monotonic() - started < SECONDS or len(s.enqueued) < 1000
        ):
            time.sleep(0.5)
        stop.set()
        for p in producers:
            p.join(150)
        cron.stop()
        left = s.finish()
    finally:
        stop.set()
        s.fleet.kill_all()

    analysis = s.analyse()
    print(
        f"\nFIGURES sqlite: {s.figures(analysis)} enqueue_processes={batches} "
        f"enqueued_while_draining={len(s.enqueued)}"
    )
    assert problems == []
    assert not left, f"still not done after the final drains: {left}"
    assert s.fleet.problems() == []  # exit 0, and never `database is locked`
    assert analysis.violations == []
    assert analysis.duplicates == 0  # nothing was killed: nothing may run twice
    assert len(s.enqueued) >= 1000
