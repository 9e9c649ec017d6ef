"""The cron soak while the MariaDB server is stopped and started twice: drains
either recover (reconnect and acknowledge) or exit 3 cleanly; nothing is lost."""

from __future__ import annotations

import fcntl
import random
import time

import pytest

from tests.conftest import MYSQL_URL, cannot_run_here
from tests.faults import harness
from tests.faults.harness import chaos_monkey, crontab
from tests.faults.history import Disruption
from tests.faults.scenario import BATCH, POISON, Scenario

pytestmark = pytest.mark.slow

# Enough work that drains still hold messages when the second (long) outage
# comes, ~25 s in: 8 drains at ~0.15 s a message need ~35 s for 1,800.
WORK = {"sleep": 0.3, "fail": 0.1}
PER_QUEUE = 900
# Seconds the server stays stopped: drains ride out the first outage (they
# retry for ~15 s, up to ~20 s with their backoff); the second outlasts that,
# so drains holding messages give up with exit 3 and leave them to gc.
DOWN_FOR = (3.0, 25.0)
# A drain alive while the server was down could not heartbeat: gc may requeue
# what it held until it reconnects (at most RECONNECT_FOR later) and sees
# that its --max-seconds are over.
AFTER_OUTAGE = 20.0


@pytest.fixture
def restart_lock():
    """One restart test at a time on this machine (two sessions running the suite)."""
    with open("/tmp/mq-faults-mariadb-restart.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def test_server_stopped_and_started_twice(restart_lock, fault_mysql, tmp_path):
    reason = harness.can_restart_mariadb(MYSQL_URL)
    if reason:
        cannot_run_here(reason)
    db = fault_mysql
    s = Scenario(tmp_path, db.url, db.sql, {"alpha": {}, "beta": {}, "poison": POISON}, db.env())
    s.enqueue("alpha", PER_QUEUE, **WORK)
    s.enqueue("beta", PER_QUEUE, **WORK)
    s.enqueue("poison", 20)
    cron = crontab(
        s.fleet,
        [("main", "alpha"), ("main", "beta"), ("main", "poison")],
        ["--max-seconds", "3", "--concurrency", "4"],
        every=0.5,
        rng=random.Random(12),
    )
    chaos = chaos_monkey(s.fleet, every=(1.0, 3.0), rng=random.Random(13))
    gc = s.gc_loop(every=4.0, allow_exit_3=True)
    outages: list[tuple[float, float]] = []
    try:
        for loop in (cron, chaos, gc):
            loop.start()
        for down_for in DOWN_FOR:
            time.sleep(8)
            # no kills while the server is away: the drains that ride out the
            # outage, or give up holding messages, are what is under test here
            chaos.paused.set()
            down = time.time()
            harness.stop_mariadb()
            time.sleep(down_for)
            harness.start_mariadb()
            outages.append((down, time.time()))
            time.sleep(5)  # drains reconnect, or finish giving up
            chaos.paused.clear()
        time.sleep(8)
        for loop in (cron, chaos, gc):
            loop.stop()
        left = s.finish()
    finally:
        s.fleet.kill_all()
        if not harness.port_open():
            harness.start_mariadb()

    gave_up = [d for d in s.fleet.drains if d.proc.returncode == 3 and "gc --stalled" in d.stderr()]
    hit = [
        Disruption(d.pid, up + AFTER_OUTAGE, "server down")
        for d in s.fleet.drains
        for down, up in outages
        if d.started <= up and (d.ended is None or d.ended >= down)
    ]
    analysis = s.analyse(hit)
    codes = s.fleet.exit_codes()
    print(
        f"\nFIGURES restart: {s.figures(analysis)} restarts={len(outages)} "
        f"downtime={sum(up - down for down, up in outages):.1f}s "
        f"gave_up_holding_messages={len(gave_up)}"
    )
    assert not left, f"still not done after the final drains: {left}"
    assert s.gc_log.failures == []
    assert s.fleet.problems(allowed_codes=frozenset({0, 3})) == []
    assert analysis.violations == []
    assert len(outages) == 2
    assert codes[3] > 0, "some drains should have met the stopped server"
    assert gave_up, "a drain holding messages gave up in the long outage, pointing at gc"
    kills = len(s.fleet.killed())
    assert analysis.duplicates <= (kills + codes[3] + len(hit)) * BATCH
