"""The cron soak while the MariaDB or PostgreSQL server is stopped and started
twice: drains either recover (reconnect and acknowledge, or wait for the
server up to their end) or exit 3 cleanly; nothing is lost.

The server stopped is a private one this test starts (tests/servers.py) and
stops by its pid: never the shared server the rest of the suite uses."""

from __future__ import annotations

import random
import time

import pytest

from tests import servers
from tests.conftest import Db, cannot_run_here
from tests.faults.harness import DrainProc, chaos_monkey, crontab, wait_for
from tests.faults.history import Disruption, read
from tests.faults.scenario import BATCH, POISON, Scenario

# serial: a long scenario whose timing is under test; it runs alone (tests/run.sh).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Enough work that drains still hold messages when the second (long) outage
# comes, ~25 s in: 8 drains at ~0.15 s a message need ~35 s for 1,800.
WORK = {"sleep": 0.3, "fail": 0.1}
PER_QUEUE = 900
# Seconds the server stays stopped: drains ride out the first outage (they
# retry for ~15 s, up to ~20 s with their backoff); the second outlasts that,
# so drains holding messages give up what they hold (left to gc), then wait for
# the server up to their own end (exit 3 if it comes first).
DOWN_FOR = (3.0, 25.0)
# The long outage must find a drain holding a message: one of its own, whose
# handler runs this long, seen running before the server is stopped. Its drain
# cannot prove its session for liveness.FENCE (2 s) and stops it, then gives it up.
HOLD = {"handler": "tests.faults.jobs:slow", "concurrency": 1}
HOLD_SLEEP = 8.0
# A drain alive while the server was down could not heartbeat: gc may requeue
# what it held until it reconnects (at most RECONNECT_FOR later) and sees
# that its --max-seconds are over.
AFTER_OUTAGE = 20.0


@pytest.fixture(params=["mysql", "postgres"])
def private_server(request, tmp_path):
    """A server of this test's own (datadir, port, socket), with a database and schema:
    MariaDB or PostgreSQL. Both have stop() (by pid), start() and running()."""
    server: servers.PrivateMariadb | servers.PrivatePostgres
    if request.param == "mysql":
        reason = servers.unavailable()
        if reason:
            cannot_run_here(f"cannot start a private MariaDB: {reason}")
        server = servers.PrivateMariadb()
    else:
        reason = servers.pg_unavailable()
        if reason:
            cannot_run_here(f"cannot start a private PostgreSQL: {reason}")
        server = servers.PrivatePostgres()
    try:
        if isinstance(server, servers.PrivatePostgres):
            server.sql("CREATE DATABASE mq_restart")
            db = Db("postgres", server.url("mq_restart"), tmp_path)
        else:
            server.node.sql("CREATE DATABASE mq_restart")
            db = Db("mysql", f"mysql://root@127.0.0.1:{server.port}/mq_restart", tmp_path)
        result = db.run("init")
        assert result.exit_code == 0, result.output
        yield server, db
    finally:
        server.close()


def test_server_stopped_and_started_twice(private_server, tmp_path):
    server, db = private_server
    queues = {"alpha": {}, "beta": {}, "poison": POISON, "hold": HOLD}
    s = Scenario(tmp_path, db.url, db.sql, queues, db.env())
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
    holder: DrainProc | None = None
    try:
        for loop in (cron, chaos, gc):
            loop.start()
        for down_for in DOWN_FOR:
            time.sleep(8)
            # no kills while the server is away: the drains that ride out the
            # outage, or give up holding messages, are what is under test here
            chaos.paused.set()
            if down_for == max(DOWN_FOR):
                holder = _holding_a_message(s)
            down = time.time()
            server.stop()  # SIGTERM to this server's own pid; waits for it to exit
            time.sleep(down_for)
            server.start()
            outages.append((down, time.time()))
            time.sleep(5)  # drains reconnect, or finish giving up
            chaos.paused.clear()
        time.sleep(8)
        for loop in (cron, chaos, gc):
            loop.stop()
        left = s.finish()
    finally:
        s.fleet.kill_all()
        if not server.running():
            server.start()

    # Left what they held to gc; then exit 3, or (a plain cron drain, which waits 30 s for
    # the server) went on once it was back: exit 0.
    gave_up = [
        d for d in s.fleet.drains if d.proc.returncode in (0, 3) and "gc --stalled" in d.stderr()
    ]
    assert holder is not None
    hit = [
        Disruption(d.pid, up + AFTER_OUTAGE, "server down")
        for d in s.fleet.drains
        for down, up in outages
        if d.started <= up and (d.ended is None or d.ended >= down)
    ]
    analysis = s.analyse(hit)
    codes = s.fleet.exit_codes()
    print(
        f"\nFIGURES restart ({db.kind}): {s.figures(analysis)} restarts={len(outages)} "
        f"downtime={sum(up - down for down, up in outages):.1f}s "
        f"gave_up_holding_messages={len(gave_up)}"
    )
    assert not left, f"still not done after the final drains: {left}"
    assert s.gc_log.failures == []
    assert s.fleet.problems(allowed_codes=frozenset({0, 3})) == []
    assert analysis.violations == []
    assert len(outages) == 2
    assert codes[3] > 0, "some drains should have met the stopped server"
    assert holder in gave_up, (
        f"the drain holding a message in the long outage exited {holder.proc.returncode}, "
        f"without pointing at gc: {holder.stderr()[-600:]}"
    )
    kills = len(s.fleet.killed())
    assert analysis.duplicates <= (kills + codes[3] + len(hit)) * BATCH


def _holding_a_message(s: Scenario) -> DrainProc:
    """A drain of its own, seen running a message that outlasts the outage's start."""
    s.enqueue("hold", 1, sleep=HOLD_SLEEP)
    key = max((k for k, q in s.enqueued.items() if q == "hold"), key=lambda k: int(k.split("-")[1]))
    holder = s.fleet.start("hold")
    wait_for(
        lambda: any(r["msg"] == key and r["event"] == "start" for r in read(s.history)), 30, 0.05
    )
    assert holder.proc.poll() is None, holder.stderr()
    return holder
