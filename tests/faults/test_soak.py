"""Cron soak on MariaDB and PostgreSQL: a simulated crontab starts drains of several queues
every ~0.5 s while handlers fail and sleep at random, a producer keeps
enqueuing, gc runs now and then, and a chaos thread kill -9s random drains.
Then gc and final drains; the history must satisfy the contract."""

from __future__ import annotations

import random
import time

import pytest

from tests.faults.harness import chaos_monkey, crontab
from tests.faults.scenario import BATCH, POISON, Scenario

# serial: a long scenario whose timing is under test; it runs alone (tests/run.sh).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SOAK_SECONDS = 45
WORK = {"sleep": 0.05, "fail": 0.1}  # each run sleeps up to 50 ms and fails one time in ten


def test_cron_soak_with_kill_9(fault_db, tmp_path):
    db = fault_db
    s = Scenario(tmp_path, db.url, db.sql, {"alpha": {}, "beta": {}, "poison": POISON}, db.env())
    # Half the messages are there from the start, the rest arrive while drains run.
    s.enqueue("alpha", 600, **WORK)
    s.enqueue("beta", 600, **WORK)
    s.enqueue("poison", 30)
    plan = [(q, 70, WORK) for _ in range(6) for q in ("alpha", "beta")] + [("poison", 20, {})]
    producer = s.producer(plan, every=2.5)
    cron = crontab(
        s.fleet,
        [("main", "alpha"), ("main", "beta"), ("main", "poison")],
        ["--max-seconds", "3", "--concurrency", "4"],
        every=0.5,
        rng=random.Random(2),
    )
    chaos = chaos_monkey(s.fleet, every=(0.5, 1.5), rng=random.Random(3))
    gc = s.gc_loop(every=4.0)
    try:
        started = time.monotonic()
        for loop in (producer, cron, chaos, gc):
            loop.start()
        producer.join(SOAK_SECONDS)
        time.sleep(max(0.0, started + SOAK_SECONDS - time.monotonic()))
        for loop in (producer, cron, chaos, gc):
            loop.stop()
        left = s.finish()
    finally:
        s.fleet.kill_all()

    analysis = s.analyse()
    print(f"\nFIGURES soak ({db.kind}): {s.figures(analysis)}")
    assert not left, f"still not done after the final drains: {left}"
    assert s.gc_log.failures == []
    assert s.fleet.problems() == []
    assert analysis.violations == []
    kills = len(s.fleet.killed())
    assert kills >= 10, "the chaos thread should have killed drains"
    assert analysis.duplicates <= kills * BATCH
    assert len(s.enqueued) == 2090
    assert analysis.failed == 50  # the poison messages, each after 3 failures
