"""Drains through a real PgBouncer (tests/pooler.py) in transaction and in session mode,
checked by the history checker.

In transaction mode every transaction may land on another server session: four
drains on four "hosts" (each its own lock_dir) used to fail there on psycopg's
server-side prepared statements, with messages run but never acknowledged. They
must now run every message exactly once and exit 0. A drain killed with -9
through the pooler loses nothing: in session mode its lock dies with its server
session (PgBouncer resets it), in transaction mode its messages go stalled after
stalled_after; `mq gc --stalled --requeue` gives them back either way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Db, pooled
from tests.faults.harness import wait_for
from tests.faults.scenario import STALLED_AFTER, Scenario

pytestmark = pytest.mark.slow


@pytest.fixture(params=["transaction", "session"])
def pooler_db(request: pytest.FixtureRequest, pgbouncers, tmp_path: Path) -> Iterator[Db]:
    """A fresh database through PgBouncer: transaction mode left to pooler: auto (detected),
    session mode said by ?pooler=session."""
    mode = request.param
    yield from pooled(pgbouncers, mode, tmp_path, "session" if mode == "session" else "")


def mode_of(db: Db) -> str:
    return "session" if "pooler=session" in db.url else "transaction"


def test_four_drains_on_four_hosts_run_each_message_once(pooler_db, tmp_path):
    db = pooler_db
    s = Scenario(tmp_path, db.url, db.sql, {"p": {}}, db.env())
    for number in range(4):
        s.add_host(f"host{number}", db.url)
    for _ in range(3):
        s.enqueue("p", 1000)
    started = time.monotonic()
    for number in range(4):
        s.fleet.start("p", "--batch-size", "20", host=f"host{number}")
    stuck = s.fleet.wait(240)
    seconds = time.monotonic() - started
    assert not stuck, "drains still running after 240 s"
    analysis = s.analyse()
    print(
        f"\nFIGURES pgbouncer {mode_of(db)} 4 drains: {s.figures(analysis)} seconds={seconds:.1f}"
    )
    assert s.fleet.problems() == []  # every drain exit 0, no traceback
    assert [d.proc.returncode for d in s.fleet.drains] == [0, 0, 0, 0]
    for d in s.fleet.drains:
        assert "prepared statement" not in d.stderr()
    assert analysis.violations == []
    assert analysis.duplicates == 0
    assert analysis.successes == 3000
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
    assert len({d.host for d in s.fleet.drains}) == 4


def test_a_drain_killed_through_the_pooler_loses_nothing(pooler_db, tmp_path):
    db = pooler_db
    mode = mode_of(db)
    s = Scenario(tmp_path, db.url, db.sql, {"p": {}}, db.env())
    s.add_host("other", db.url)
    s.enqueue("p", 400, sleep=0.05)
    victim = s.fleet.start("p", "--wait", "--max-seconds", "60")
    survivor = s.fleet.start("p", "--max-seconds", "60", host="other")
    held = "SELECT COUNT(*) FROM mq_messages WHERE status = 'processing' AND owner LIKE %s"
    wait_for(lambda: db.sql(held, (f"%:{victim.pid}:%",))[0][0] > 0, 30, every=0.02)
    s.fleet.kill(victim)
    killed = time.monotonic()
    # Until gc gives its messages back, they stay processing: never lost, never run twice.
    # Seconds from the kill to the start and to the end of the gc run that requeued:
    # the check happened between the two, and on a loaded machine the interpreter's
    # start alone may take seconds.
    recovered = ended = None
    while time.monotonic() - killed < STALLED_AFTER + 20:
        run_started = time.monotonic()
        s.gc()
        if s.gc_log.requeued:
            recovered, ended = run_started - killed, time.monotonic() - killed
            break
        time.sleep(0.25)
    assert recovered is not None, "gc never gave back the killed drain's messages"
    survivor.proc.wait(90)
    left = s.finish()
    analysis = s.analyse()
    print(
        f"\nFIGURES pgbouncer {mode} kill -9: {s.figures(analysis)} requeued_after={recovered:.1f}s"
    )
    assert not left, f"still not done after the final drains: {left}"
    assert s.gc_log.failures == []
    assert s.fleet.problems() == []
    assert analysis.violations == []
    if mode == "session":
        assert recovered < STALLED_AFTER  # its lock died with its session: seen at once
    else:
        assert ended is not None and ended >= STALLED_AFTER - 1  # heartbeats alone: after it
