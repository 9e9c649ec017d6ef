"""max_drains and rate_limit on a real 3-node Galera cluster (tests/servers.py).

GET_LOCK is local to a node, so a Galera fleet holds its slots as rows with a
heartbeat (mq_cli/host/fleet.py): a killed drain's slot frees after stalled_after.
One cluster for the module: it takes a while to start.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Db, cannot_run_here
from tests.faults.history import read
from tests.fleet_helpers import (
    enqueue,
    finish,
    host_config,
    intervals,
    most_at_once,
    over_the_bucket,
    spawn_drain,
)
from tests.servers import GaleraCluster, unavailable

# serial: a long scenario whose timing is under test; it runs alone (tests/run.sh).
pytestmark = [pytest.mark.slow, pytest.mark.serial]
SLOW = "tests.faults.jobs:slow"


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    reason = unavailable(galera=True)
    if reason:
        cannot_run_here(f"no Galera cluster on this machine: {reason}")
    cluster = GaleraCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def galera_db(cluster: GaleraCluster, tmp_path: Path) -> Iterator[tuple[Db, list[str]]]:
    for node in cluster.nodes:
        if not node.running():
            cluster.restart(node)
    name = "mqf_" + uuid.uuid4().hex[:12]
    cluster.nodes[0].sql(f"CREATE DATABASE `{name}`")
    urls = cluster.urls(name)
    db = Db("mysql", urls[0], tmp_path)
    result = db.run("init")
    assert result.exit_code == 0, result.output
    try:
        yield db, urls
    finally:
        cluster.nodes[0].sql(f"DROP DATABASE IF EXISTS `{name}`")


def test_six_drains_on_three_nodes_run_at_most_two_at_once(galera_db, tmp_path):
    db, urls = galera_db
    settings = {"handler": SLOW, "max_drains": 2, "concurrency": 2, "batch_size": 1,
                "stalled_after": "6s"}  # fmt: skip
    configs = [host_config(tmp_path, urls[h], h, "fl", settings) for h in range(3)]
    history = tmp_path / "history.jsonl"
    enqueue(db, "fl", 12, sleep=0.4)
    drains = [spawn_drain(db, configs[i % 3], history, "-q", "fl", "--wait",
                          "--max-seconds", "8") for i in range(6)]  # fmt: skip
    reports = finish(drains)
    runs = intervals(history)
    assert len(runs) == 12
    assert most_at_once(runs) == 2
    assert sum(r["succeeded"] for r in reports) == 12


def test_a_killed_drain_frees_its_fleet_slot_after_stalled_after(galera_db, tmp_path):
    db, urls = galera_db
    bound = 3.0
    settings = {"handler": SLOW, "max_drains": 1, "batch_size": 1, "stalled_after": "3s"}
    first = host_config(tmp_path, urls[0], 0, "fl", settings)
    second = host_config(tmp_path, urls[1], 1, "fl", settings)
    history = tmp_path / "history.jsonl"
    enqueue(db, "fl", 1, sleep=60, prefix="long")
    holder = spawn_drain(db, first, history, "-q", "fl")
    deadline = time.monotonic() + 30
    while not any(r["event"] == "start" for r in read(history)):
        assert time.monotonic() < deadline, "the first drain never started its handler"
        time.sleep(0.05)
    enqueue(db, "fl", 1, sleep=0, prefix="next")
    time.sleep(bound)  # longer than the bound: its heartbeat keeps the slot
    busy = finish([spawn_drain(db, second, history, "-q", "fl")])[0]
    assert busy["busy"] == ["fl"] and busy["succeeded"] == 0
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    killed = time.monotonic()
    # The holder's last heartbeat is at most stalled_after/3 old at the kill, so a
    # drain that starts stalled_after after it finds the slot free. Judged by when
    # each drain began, not by when it ended: a loaded machine slows the ending.
    while True:
        began = time.monotonic()
        report = finish([spawn_drain(db, second, history, "-q", "fl")])[0]
        if report["succeeded"]:
            break
        assert began - killed < bound, "the slot stayed taken past stalled_after"
        time.sleep(0.2)


def test_rate_limit_holds_across_nodes(galera_db, tmp_path):
    db, urls = galera_db
    settings = {"handler": SLOW, "rate_limit": "10/s"}
    configs = [host_config(tmp_path, urls[h], h, "r", settings) for h in range(3)]
    history = tmp_path / "history.jsonl"
    enqueue(db, "r", 30, sleep=0)
    spawned = time.time()
    reports = finish([spawn_drain(db, configs[h], history, "-q", "r") for h in range(3)])
    assert sum(r["succeeded"] for r in reports) == 30
    times = sorted(r["t"] for r in read(history) if r["event"] == "start")
    # A full bucket (10), then 10 a second: the last token is granted 2 s after the
    # first. Judged from the spawn, not the first start: the first handlers wait on
    # their runner child's start-up, which a loaded machine slows (1.65 s seen in CI).
    assert times[-1] - spawned >= 1.9
    assert over_the_bucket(times, spawned, burst=10, rate=10) == []


def test_status_names_why_no_drain_could_start(galera_db, tmp_path):
    db, urls = galera_db
    bad = host_config(tmp_path, urls[2], 2, "jobs", {"handler": "nosuch.module:fn"})
    proc = spawn_drain(db, bad, tmp_path / "history.jsonl", "-q", "jobs")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and b"nosuch" in err
    import json

    result = db.run("status", "--json")  # through node 1
    stuck = json.loads(result.stdout)["queues"]["jobs"]["cannot_start"]
    assert "no module named 'nosuch'" in stuck["error"]
