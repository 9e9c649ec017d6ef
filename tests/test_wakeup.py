"""`mq drain --wait` starts a message within milliseconds of its enqueue on the
same host (a FIFO in the lock directory), instead of at its next poll."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from mq_cli.drain import wakeup


def test_a_producer_wakes_every_waiting_drain_of_its_queue(tmp_path):
    lock_dir = str(tmp_path / "locks")
    waiters = [wakeup.Waiter(lock_dir, "q"), wakeup.Waiter(lock_dir, "q.other")]
    waiters[1].close()
    mine = wakeup.Waiter.__new__(wakeup.Waiter)  # a second drain of q (another pid)
    mine.queue, mine.backend, mine.listening = "q", None, False
    mine.path = os.path.join(lock_dir, "wake", "q.999999")
    os.mkfifo(mine.path, 0o600)
    mine.fd = os.open(mine.path, os.O_RDWR | os.O_NONBLOCK)
    try:
        threading.Timer(0.2, wakeup.notify, (lock_dir, "q")).start()
        started = time.monotonic()
        assert waiters[0].wait(5.0)
        assert time.monotonic() - started < 2.0
        assert mine.wait(0)  # both drains of q were woken
        assert not waiters[0].wait(0.05)  # one wake-up, then quiet again
    finally:
        waiters[0].close()
        mine.close()
    assert os.listdir(os.path.join(lock_dir, "wake")) == []


def test_the_fifo_of_a_dead_drain_is_tidied_by_the_next_producer(tmp_path):
    lock_dir = str(tmp_path / "locks")
    waiter = wakeup.Waiter(lock_dir, "q")
    os.close(waiter.fd)  # the drain died: no reader any more
    wakeup.notify(lock_dir, "q")
    assert not os.path.exists(waiter.path)
    wakeup.notify(str(tmp_path / "nowhere"), "q")  # no drain ever waited: nothing to do


def test_waiting_drain_starts_an_enqueued_message_at_once(db, tmp_path):
    log = tmp_path / "ran.jsonl"
    (tmp_path / "mq.yaml").write_text("queues:\n  q: {handler: 'tests.jobs:record_time'}\n")
    env = db.env(MQ_TEST_LOG=str(log))
    drain = db.spawn("drain", "-q", "q", "--wait", "--max-seconds", "20", env=env)
    try:
        latencies = []
        for n in range(6):
            time.sleep(2.3 if n == 0 else 1.3)  # deep in the once-a-second polls
            producer = db.spawn("enqueue", "-q", "q", json.dumps({"n": n}), env=env)
            producer.communicate(timeout=30)
            committed = time.time()  # the enqueue process has exited: committed
            assert producer.returncode == 0
            end = time.monotonic() + 10
            while len(_runs(log)) <= n and time.monotonic() < end:
                time.sleep(0.005)
            latencies.append(_runs(log)[n]["t"] - committed)
        # A poll once a second would make these up to 1 s, 0.5 s on average (all
        # but one under 0.3 s: 1 % likely). One may meet a busy machine.
        assert sum(latency < 0.3 for latency in latencies) >= 5, latencies
    finally:
        drain.terminate()
        drain.communicate(timeout=30)
    assert drain.returncode == 0


def _runs(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _waiting_drain_on_another_host(pg_db, tmp_path: Path, log: Path):
    """A waiting drain with a lock directory of its own: no producer here can reach
    its FIFO, as on another host; only PostgreSQL's NOTIFY can wake it."""
    assert pg_db.run("init").exit_code == 0
    (tmp_path / "hostb.yaml").write_text(
        f"lock_dir: {tmp_path / 'hostb-locks'}\n"
        "queues:\n  q: {handler: 'tests.jobs:record_time'}\n"
    )
    env = pg_db.env(MQ_TEST_LOG=str(log), MQ_CONFIG=str(tmp_path / "hostb.yaml"))
    return pg_db.spawn("drain", "-q", "q", "--wait", "--max-seconds", "30", env=env)


def _latency(log: Path, n: int, committed: float) -> float:
    end = time.monotonic() + 10
    while len(_runs(log)) <= n and time.monotonic() < end:
        time.sleep(0.005)
    return _runs(log)[n]["t"] - committed


def test_postgres_wakes_a_waiting_drain_on_another_host(pg_db, tmp_path):
    import mq_cli

    log = tmp_path / "ran.jsonl"
    drain = _waiting_drain_on_another_host(pg_db, tmp_path, log)
    try:
        latencies = []
        with mq_cli.connect(database=pg_db.url) as producer:
            for n in range(6):
                time.sleep(2.3 if n == 0 else 1.3)  # deep in the once-a-second polls
                producer.enqueue("q", {"n": n})
                latencies.append(_latency(log, n, time.time()))
        # Polling would make these up to 1 s, 0.5 s on average.
        assert sum(latency < 0.3 for latency in latencies) >= 5, latencies
    finally:
        drain.terminate()
        drain.communicate(timeout=30)
    assert drain.returncode == 0


def test_postgres_wakes_the_drain_when_the_applications_transaction_commits(pg_db, tmp_path):
    import psycopg

    import mq_cli

    log = tmp_path / "ran.jsonl"
    drain = _waiting_drain_on_another_host(pg_db, tmp_path, log)
    try:
        time.sleep(2.3)
        with psycopg.connect(pg_db.url, sslmode="disable") as conn:
            mq_cli.enqueue("q", {"n": 0}, connection=conn)
            time.sleep(1.5)
            assert _runs(log) == []  # not before the commit
            conn.commit()
            latency = _latency(log, 0, time.time())
        assert latency < 0.5, latency
    finally:
        drain.terminate()
        drain.communicate(timeout=30)
    assert drain.returncode == 0


def test_postgres_notifies_each_ready_enqueue_unless_the_queue_says_not(pg_db, tmp_path):
    import psycopg

    import mq_cli

    assert pg_db.run("init").exit_code == 0
    (tmp_path / "mq.yaml").write_text("queues:\n  quiet: {notify: false}\n")
    with psycopg.connect(pg_db.url, autocommit=True, sslmode="disable") as listener:
        listener.execute('LISTEN "mq_messages_wake"')

        def heard() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=0.5, stop_after=10)]

        env = {"MQ_CONFIG": str(tmp_path / "mq.yaml")}
        assert pg_db.run("enqueue", "-q", "loud", '"a"', env=env).exit_code == 0
        assert heard() == ["loud"]
        assert pg_db.run("enqueue", "-q", "quiet", '"b"', env=env).exit_code == 0
        assert pg_db.run("enqueue", "-q", "loud", "--delay", "1h", '"c"', env=env).exit_code == 0
        assert heard() == []  # the queue said not to; a delayed message wakes nobody
        with psycopg.connect(pg_db.url, sslmode="disable") as app:
            mq_cli.enqueue("loud", "d", connection=app)
            mq_cli.enqueue("quiet", "e", connection=app, notify=False)
            assert heard() == []  # not before the application's commit
        assert heard() == ["loud"]
