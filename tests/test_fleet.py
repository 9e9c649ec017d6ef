"""max_drains: at most N drains of a queue across every host, with real processes.

Each simulated host is a config file with its own lock_dir (so the per-host
`concurrency` cap does not help); the handler records its start and end
(tests/faults/jobs.py), and the history says how many ran at once.
"""

from __future__ import annotations

import json
import signal
import time

from tests.fleet_helpers import (
    enqueue,
    finish,
    host_config,
    intervals,
    most_at_once,
    spawn_drain,
    stop_when_done,
)

SLOW = "tests.faults.jobs:slow"
#: like SLOW; messages with "meet": N first wait until N runs are under way at once
MEET = "tests.faults.jobs:meet"


def test_six_drains_on_three_hosts_run_at_most_two_at_once(db, tmp_path):
    settings = {"handler": MEET, "max_drains": 2, "concurrency": 2, "batch_size": 1}
    configs = [host_config(tmp_path, db.url, h, "fl", settings) for h in range(3)]
    history = tmp_path / "history.jsonl"
    # The first two wait for each other (the cap is used), the rest take 0.4 s each.
    enqueue(db, "fl", 2, sleep=0.4, prefix="meet", meet=2)
    enqueue(db, "fl", 10, sleep=0.4)
    drains = [spawn_drain(db, configs[i % 3], history, "-q", "fl", "--wait",
                          "--max-seconds", "120") for i in range(6)]  # fmt: skip
    stop_when_done(drains, history, 12)
    reports = finish(drains)
    runs = intervals(history)
    assert len(runs) == 12
    assert most_at_once(runs) == 2  # never more, and the cap is used
    assert sum(r["succeeded"] for r in reports) == 12
    # The drains that found no fleet slot said so, as for the per-host cap.
    assert sum("fl" in r["busy"] for r in reports) >= 1


def test_a_killed_drain_frees_its_fleet_slot_at_once(db, tmp_path):
    settings = {"handler": SLOW, "max_drains": 1, "batch_size": 1}
    first, second = (host_config(tmp_path, db.url, h, "fl", settings) for h in range(2))
    history = tmp_path / "history.jsonl"
    enqueue(db, "fl", 1, sleep=60, prefix="long")
    holder = spawn_drain(db, first, history, "-q", "fl")
    deadline = time.monotonic() + 120  # a hang's deadline
    while not any(r["event"] == "start" for r in _read(history)):
        assert time.monotonic() < deadline, "the first drain never started its handler"
        time.sleep(0.05)
    enqueue(db, "fl", 1, sleep=0, prefix="next")
    busy = finish([spawn_drain(db, second, history, "-q", "fl")])[0]
    assert busy["busy"] == ["fl"] and busy["succeeded"] == 0
    status = db.run("-c", str(first), "status", "--json")
    assert json.loads(status.stdout)["queues"]["fl"]["max_drains"] == {"limit": 1, "in_use": 1}
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    killed = time.monotonic()
    # Session locks and lock files die with their holder: no wait for a bound (a
    # heartbeat-kept slot, Galera's, would free only after stalled_after: an hour
    # here). 60 s only catches a slot that never frees.
    while True:
        report = finish([spawn_drain(db, second, history, "-q", "fl")])[0]
        if report["succeeded"]:
            break
        assert time.monotonic() - killed < 60, "the slot stayed taken after kill -9"
    status = db.run("-c", str(first), "status", "--json")
    assert json.loads(status.stdout)["queues"]["fl"]["max_drains"] == {"limit": 1, "in_use": 0}


def test_check_and_drain_without_max_drains_are_unchanged(db, tmp_path):
    config = host_config(tmp_path, db.url, 0, "fl", {"handler": SLOW})
    enqueue(db, "fl", 2, sleep=0)
    history = tmp_path / "history.jsonl"
    report = finish([spawn_drain(db, config, history, "-q", "fl")])[0]
    assert report["succeeded"] == 2 and report["busy"] == []


def _read(path):
    from tests.faults.history import read

    return read(path)


def test_max_drains_is_validated(tmp_path, sqlite_db):
    path = tmp_path / "mq.yaml"
    path.write_text(json.dumps({"queues": {"fl": {"handler": SLOW, "max_drains": 0}}}))
    result = sqlite_db.run("-c", str(path), "check")
    assert result.exit_code == 1
    assert "max_drains" in result.output and "between 1 and 1000" in result.output


def test_check_says_how_the_limits_are_held(db, tmp_path):
    settings = {"handler": SLOW, "max_drains": 2, "rate_limit": "600/min"}
    config = host_config(tmp_path, db.url, 0, "fl", settings)
    result = db.run("-c", str(config), "check")
    line = next(x for x in result.stdout.splitlines() if "queue fl limits" in x)
    assert line.startswith("ok") and "max_drains 2" in line and "rate_limit 10/s" in line
    assert ("lock files" if db.kind == "sqlite" else "session locks") in line
    db.sql("DROP TABLE mq_messages_rates")
    result = db.run("-c", str(config), "check")
    assert result.exit_code == 1
    line = next(x for x in result.stdout.splitlines() if "queue fl limits" in x)
    assert line.startswith("FAIL") and "mq init" in line
    assert db.run("init").exit_code == 0
    assert db.run("-c", str(config), "check").exit_code == 0


def test_processes_start_no_more_drains_than_max_drains(db, tmp_path):
    settings = {"handler": MEET, "max_drains": 2, "concurrency": 4, "batch_size": 1}
    config = host_config(tmp_path, db.url, 0, "fl", settings)
    history = tmp_path / "history.jsonl"
    enqueue(db, "fl", 2, sleep=0.3, prefix="meet", meet=2)
    enqueue(db, "fl", 6, sleep=0.3)
    report = finish([spawn_drain(db, config, history, "-q", "fl", "--processes", "0")])[0]
    assert report["succeeded"] == 8 and report["processes"] == 2
    assert most_at_once(intervals(history)) == 2
