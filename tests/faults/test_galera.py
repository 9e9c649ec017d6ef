"""A real 3-node Galera cluster (tests/servers.py), drains on every node.

Galera keeps row locks local to a node: two nodes can both lock the same ready
rows, and the loser learns it from a certification failure (1213) at COMMIT.
These scenarios check, with the history checker, that every message still runs
exactly once when nothing is killed, that a node killed with -9 loses nothing,
and that drains behind a proxy that fails over to another node carry on.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq_cli.drain.session import RECONNECT_FOR
from tests.conftest import Db, cannot_run_here
from tests.faults import harness
from tests.faults.harness import crontab
from tests.faults.history import Disruption
from tests.faults.scenario import BATCH, Scenario
from tests.proxy import Proxy
from tests.servers import GaleraCluster, unavailable

# serial: a long scenario whose timing is under test; it runs alone (tests/run.sh).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

GC_EVERY = 3.0
# The killed node stays down until its drains gave up (RECONNECT_FOR) and gc
# took what they held (two of its rounds), with a margin for a loaded machine.
DOWN_FOR = RECONNECT_FOR + 2 * GC_EVERY + 4.0


def held_on(s: Scenario, host: str) -> list[int]:
    """Ids of the messages that live drains on ``host`` hold (owner: host:pid:...)."""
    pids = {d.pid for d in s.fleet.alive(host=host)}
    rows = s.sql("SELECT id, owner FROM mq_messages WHERE status = 'processing'")
    return [i for i, owner in rows if owner and int(owner.split(":")[1]) in pids]


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
    """A fresh database on the cluster, its schema made through node 1: (db, node URLs)."""
    for node in cluster.nodes:
        if not node.running():  # a test that killed a node and failed half-way
            cluster.restart(node)
    name = "mqg_" + uuid.uuid4().hex[:12]
    cluster.nodes[0].sql(f"CREATE DATABASE `{name}`")
    urls = cluster.urls(name)
    db = Db("mysql", urls[0], tmp_path)
    result = db.run("init")
    assert result.exit_code == 0, result.output
    try:
        yield db, urls
    finally:
        cluster.nodes[0].sql(f"DROP DATABASE IF EXISTS `{name}`")


def scenario(db: Db, urls: list[str], tmp_path: Path, **queues: dict) -> Scenario:
    s = Scenario(tmp_path, db.url, db.sql, queues or {"g": {}}, db.env())
    for number, url in enumerate(urls, 1):
        s.add_host(f"node{number}", url)
    return s


def test_drains_on_every_node_run_each_message_once(galera_db, tmp_path):
    """Queue g: a DELETE per success; queue ga: group_ack, whose claims go ahead (the
    group's DELETE and the claim's SELECT in flight while the batch ends), on each node."""
    db, urls = galera_db
    s = scenario(db, urls, tmp_path, g={}, ga={"group_ack": True})
    for _ in range(10):
        s.enqueue("g", 1000)
    for _ in range(3):
        s.enqueue("ga", 1000)
    for number in (1, 2, 3):
        for _ in range(2):
            s.fleet.start("g", "--batch-size", "20", host=f"node{number}")
        s.fleet.start("ga", "--batch-size", "50", host=f"node{number}", options=("-vv",))
    stuck = s.fleet.wait(300)
    assert not stuck, "drains still running after 300 s"
    analysis = s.analyse()
    print(f"\nFIGURES galera all nodes: {s.figures(analysis)}")
    assert s.fleet.problems() == []  # every drain exit 0: no 1213 reached a user
    assert analysis.violations == []
    assert analysis.duplicates == 0
    assert analysis.successes == 13_000
    grouped = [d.stderr() for d in s.fleet.drains if d.queue == "ga"]
    assert any("message(s) ahead" in err for err in grouped), grouped
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
    ran_on = {d.host for d in s.fleet.drains}
    assert ran_on == {"node1", "node2", "node3"}


def test_a_node_killed_mid_run_loses_nothing(cluster, galera_db, tmp_path):
    db, urls = galera_db
    s = scenario(db, urls, tmp_path)
    for _ in range(3):
        s.enqueue("g", 1000, sleep=0.02)
    cron = crontab(
        s.fleet,
        [(f"node{n}", "g") for n in (1, 2, 3)],
        ["--max-seconds", "4"],
        every=0.7,
        rng=random.Random(7),
        max_alive=2,
    )
    victim = cluster.nodes[2]
    gc = s.gc_loop(every=GC_EVERY)
    try:
        gc.start()
        cron.start()
        time.sleep(4)  # every node's drains at work
        # The kill must hit drains holding messages on node 3: made to happen.
        harness.wait_for(lambda: held_on(s, "node3"), 60, every=0.05)
        killed = time.time()
        victim.kill()  # SIGKILL to this node's own mariadbd, by pid
        hit = [d for d in s.fleet.alive(host="node3")]
        time.sleep(DOWN_FOR)
        cluster.restart(victim)  # rejoins by IST, then Synced
        time.sleep(6)
        cron.stop()
        gc.stop()
        left = s.finish()
    finally:
        s.fleet.kill_all()
        if not victim.running():
            cluster.restart(victim)
    disruptions = [Disruption(d.pid, killed, "node killed") for d in hit]
    analysis = s.analyse(disruptions)
    gave_up = [d for d in s.fleet.drains if d.host == "node3" and d.proc.returncode == 3]
    print(
        f"\nFIGURES galera node kill: {s.figures(analysis)} "
        f"drains_on_killed_node={len(hit)} exit3={len(gave_up)} "
        f"stalled_exit3={sum('heartbeats could not be written' in d.stderr() for d in s.fleet.drains)}"
    )
    assert not left, f"still not done after the final drains: {left}"
    assert s.gc_log.failures == []
    assert s.fleet.problems(allowed_codes=frozenset({0, 3})) == []
    exits_3 = [d for d in s.fleet.drains if d.proc.returncode == 3]
    # A healthy node's writes may stall through the view change past stalled_after:
    # gc takes its drains' messages, and those drains say so and exit 3 (counted as
    # disruptions by the checker). Any other exit 3 off the killed node is a bug.
    stalled = [d for d in exits_3 if "heartbeats could not be written" in d.stderr()]
    assert {d.host for d in exits_3 if d not in stalled} <= {"node3"}, (
        "only drains of the killed node, or drains whose writes stalled, may give up"
    )
    assert hit, "drains on node 3 held messages when it was killed"
    assert gave_up, "drains on the killed node should have met it gone"
    for d in exits_3:
        assert "mq: " in d.stderr() and "Traceback" not in d.stderr()
    assert analysis.violations == []  # nothing lost, no parallel runs
    assert analysis.duplicates <= len(exits_3) * BATCH + len(hit) * BATCH
    assert cluster.cluster_size() == 3


def test_drains_behind_a_proxy_follow_it_to_another_node(cluster, galera_db, tmp_path):
    """A load balancer in front of the cluster moves to another node (a failover):
    drains lose their connections, reconnect through it, and go on there."""
    db, urls = galera_db
    nodes = cluster.nodes
    proxy = Proxy(("127.0.0.1", nodes[0].port))
    try:
        database = urls[0].rsplit("/", 1)[1]
        s = scenario(db, [], tmp_path)
        s.add_host("lb", f"mysql://root@127.0.0.1:{proxy.port}/{database}")
        for _ in range(3):
            s.enqueue("g", 1000, sleep=0.01)
        cron = crontab(s.fleet, [("lb", "g")], ["--max-seconds", "5"], every=0.7, max_alive=3)
        switches = []
        try:
            cron.start()
            for node in (nodes[1], nodes[2], nodes[0]):
                time.sleep(5)
                proxy.target = ("127.0.0.1", node.port)
                proxy.cut()
                switches.append(time.time())
            time.sleep(3)
            cron.stop()
            left = s.finish()
        finally:
            s.fleet.kill_all()
    finally:
        proxy.close()
    analysis = s.analyse()
    print(f"\nFIGURES galera proxy failover: {s.figures(analysis)} switches={len(switches)}")
    assert not left, f"still not done after the final drains: {left}"
    assert s.fleet.problems() == []  # every drain reconnected and finished: exit 0
    assert analysis.violations == []
    assert analysis.duplicates == 0


def test_mq_check_says_it_runs_on_a_galera_node(galera_db):
    db, urls = galera_db
    for url in urls:
        result = db.run("check", env={"MQ_DATABASE_URL": url})
        line = next(x for x in result.output.splitlines() if "database mode" in x)
        assert line.startswith("ok") and "Galera cluster node" in line and "3 node(s)" in line
