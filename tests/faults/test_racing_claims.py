"""Claims that race: 8 drains whose claim SELECT takes no row locks.

An engine may accept FOR UPDATE SKIP LOCKED and lock nothing (TiDB runs it as a
plain read). With MQ_TEST_UNLOCKED_CLAIM=1 mq's claim SELECT loses its row
locks, so concurrent drains select the same rows; only the guarded mark keeps
them apart. 8 real drains, each with a lock dir of its own (as on 8 hosts, so
the per-host slots do not serialise them), drain 10,000 messages; the history
checker must find every message run exactly once.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.scenario import Scenario

pytestmark = pytest.mark.slow

DRAINS = 8
MESSAGES = 10_000


def test_eight_drains_without_row_locks_run_each_message_once(fault_db, tmp_path):
    db = fault_db
    s = Scenario(tmp_path, db.url, db.sql, {"race": {}}, db.env())
    for number in range(DRAINS):
        host = s.add_host(f"h{number}", db.url)
        host.env["MQ_TEST_UNLOCKED_CLAIM"] = "1"
        host.options = ("-v",)  # says each claim that lost rows to another
    for _ in range(MESSAGES // 1000):
        s.enqueue("race", 1000)
    started = time.monotonic()
    for number in range(DRAINS):
        s.fleet.start("race", "--batch-size", "20", host=f"h{number}")
    stuck = s.fleet.wait(120)
    seconds = time.monotonic() - started
    assert not stuck, "drains still running after 120 s"
    analysis = s.analyse()
    races = sum(d.stderr().count("another drain marked") for d in s.fleet.drains)
    print(
        f"\nFIGURES racing claims {db.kind}: {s.figures(analysis)} "
        f"claims_that_lost_rows={races} seconds={seconds:.1f}"
    )
    assert s.fleet.problems() == []  # every drain exit 0, no traceback
    assert analysis.violations == []  # nothing lost, nothing run twice at once
    assert analysis.duplicates == 0
    assert analysis.successes == MESSAGES
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
    assert races > 0, "the claims never raced: is MQ_TEST_UNLOCKED_CLAIM read?"
