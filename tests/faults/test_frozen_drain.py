"""A drain frozen (SIGSTOP: a VM pause, a swapped-out host) longer than
stalled_after: gc rightly requeues what it held and another drain takes it.
When the frozen drain wakes up, it must not run messages it no longer holds."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.faults import harness
from tests.faults.harness import GcLog, wait_for
from tests.faults.history import read

pytestmark = pytest.mark.slow

STALLED_AFTER = 1.0


def test_a_drain_that_wakes_up_does_not_run_what_it_lost(fault_mysql, tmp_path):
    db = fault_mysql
    history = tmp_path / "history.jsonl"
    config = tmp_path / "mq.yaml"
    config.write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n  jobs: {handler: 'tests.faults.jobs:slow', batch_size: 4, "
        f"stalled_after: {STALLED_AFTER:g}s, concurrency: 2}}\n"
    )
    for n in range(4):
        payload = json.dumps({"k": f"m{n}", "sleep": 0.5})
        assert db.run("enqueue", "-q", "jobs", payload).exit_code == 0
    env = db.env(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(history))
    first = db.spawn("drain", "-q", "jobs", env=env)
    second = None
    try:
        wait_for(lambda: any(r["msg"] == "m0" for r in read(history)), 20, every=0.02)
        first.send_signal(signal.SIGSTOP)
        # Stopped, it heartbeats no more: past stalled_after (by the database's
        # clock; the margin for a loaded machine) everything it holds is stalled.
        time.sleep(2 * STALLED_AFTER)
        log = GcLog()
        harness.gc_stalled_requeue(env, tmp_path, log)
        assert log.failures == [] and sum(log.requeued.values()) == 4
        second = db.spawn("drain", "-q", "jobs", env=env)
        wait_for(lambda: sum(r["event"] == "start" for r in read(history)) >= 2, 20, every=0.02)
        first.send_signal(signal.SIGCONT)  # wakes up while the second drain works
        for proc in (first, second):
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.communicate()
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
    runs: dict[str, list[int]] = {}
    for r in read(history):
        if r["event"] == "start":
            runs.setdefault(r["msg"], []).append(r["drain"])
    # m0 was running when the drain froze: its second run is the price of
    # at-least-once. m1..m3 had not started: only their new holder may run them.
    assert {m: len(d) for m, d in runs.items() if m != "m0"} == {"m1": 1, "m2": 1, "m3": 1}, runs
