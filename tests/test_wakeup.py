"""`mq drain --wait` starts a message within milliseconds of its enqueue on the
same host (a FIFO in the lock directory), instead of at its next poll.

The drain tests run the drain in this process with its polls pushed past the
test (:func:`no_polls`): a message it starts can only have been woken for, and
each enqueue waits until the drain sleeps in its wait (:class:`Sleeps`). What a
wake-up takes in milliseconds is a figure (bench/experiments/latency.py; the tests print
theirs as FIGURES), not asserted here.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mq_cli.drain import waiting
from mq_cli.host import wakeup

#: a deadline that only a hang (here: a wake-up that never came) reaches
HANG = 60.0


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
        assert waiters[0].wait(HANG)  # True: woken, not timed out
        # Both drains of q were woken (the producer may write this FIFO a moment
        # after the first: it was wait(0), which a loaded machine lost).
        assert mine.wait(HANG)
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


@pytest.fixture
def no_polls(monkeypatch):
    """A waiting drain in this process polls once an hour: within a test, only a
    wake-up can make it claim again."""
    monkeypatch.setattr(waiting, "WAIT_POLL_MIN", 3600.0)
    monkeypatch.setattr(waiting, "WAIT_POLL_MAX", 3600.0)


class Sleeps:
    """Whether the drain in this process sleeps in its wake-up wait now."""

    def __init__(self, monkeypatch):
        self.now = threading.Event()
        self.woken = 0
        original = wakeup.Waiter.wait

        def wait(waiter: wakeup.Waiter, timeout: float) -> bool:
            self.now.set()
            try:
                woken = original(waiter, timeout)
            finally:
                self.now.clear()
            self.woken += woken
            return woken

        monkeypatch.setattr(wakeup.Waiter, "wait", wait)


def drain_beside(
    db, args: list[str], env: dict, produce: Callable[[], None], options: tuple[str, ...] = ()
):
    """`mq OPTIONS drain --wait ARGS` in this process while ``produce`` runs in a
    thread; ``produce``'s failure is raised here."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            produce()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            failures.append(exc)

    producer = threading.Thread(target=run, name="producer", daemon=True)
    producer.start()
    result = db.run(*options, "drain", "--wait", "--max-seconds", str(HANG), *args, env=env)
    producer.join(HANG)
    if failures:
        raise failures[0]
    assert not producer.is_alive(), "the producer still runs"
    return result


def _runs(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _latency(log: Path, n: int, committed: float) -> float:
    """Seconds from ``committed`` to the start of message ``n`` (a hang fails)."""
    end = time.monotonic() + HANG
    while len(_runs(log)) <= n:
        assert time.monotonic() < end, f"message {n} never started: no wake-up?"
        time.sleep(0.005)
    return _runs(log)[n]["t"] - committed


def test_an_enqueue_wakes_a_waiting_drain_before_its_next_poll(db, tmp_path, no_polls, monkeypatch):
    log = tmp_path / "ran.jsonl"
    (tmp_path / "mq.yaml").write_text("queues:\n  q: {handler: 'tests.jobs:record_time'}\n")
    env = db.env(MQ_TEST_LOG=str(log))
    sleeps = Sleeps(monkeypatch)
    latencies: list[float] = []

    def produce() -> None:
        for n in range(3):
            assert sleeps.now.wait(HANG), "the drain never waited"
            producer = db.spawn("enqueue", "-q", "q", json.dumps({"n": n}), env=env)
            assert producer.stdout is not None
            producer.stdout.readline()  # its id, printed once committed
            committed = time.time()
            producer.communicate(timeout=HANG)
            assert producer.returncode == 0
            latencies.append(_latency(log, n, committed))

    result = drain_beside(db, ["-q", "q", "--max-messages", "3"], env, produce)
    print(f"\nFIGURES wake-up ({db.kind}): enqueue to start {_ms(latencies)}")
    assert result.exit_code == 0, result.output
    assert [r["payload"]["n"] for r in _runs(log)] == [0, 1, 2]
    assert sleeps.woken >= 3  # each start followed a wake-up, none a poll


def _ms(latencies: list[float]) -> str:
    return ", ".join(f"{latency * 1000:.1f} ms" for latency in latencies)


def _another_host(pg_db, tmp_path: Path) -> tuple[str, ...]:
    """A config whose lock directory is its own: no producer here can reach the
    drain's FIFO, as on another host; only PostgreSQL's NOTIFY can wake it."""
    assert pg_db.run("init").exit_code == 0
    (tmp_path / "hostb.yaml").write_text(
        f"lock_dir: {tmp_path / 'hostb-locks'}\n"
        "queues:\n  q: {handler: 'tests.jobs:record_time'}\n"
    )
    return ("-c", str(tmp_path / "hostb.yaml"))


def test_postgres_wakes_a_waiting_drain_on_another_host(pg_db, tmp_path, no_polls, monkeypatch):
    import mq_cli

    log = tmp_path / "ran.jsonl"
    host_b = _another_host(pg_db, tmp_path)
    sleeps = Sleeps(monkeypatch)
    latencies: list[float] = []

    def produce() -> None:
        with mq_cli.connect(database=pg_db.url) as producer:
            for n in range(3):
                assert sleeps.now.wait(HANG), "the drain never waited"
                producer.enqueue("q", {"n": n})
                latencies.append(_latency(log, n, time.time()))

    args = ["-q", "q", "--max-messages", "3"]
    result = drain_beside(pg_db, args, pg_db.env(MQ_TEST_LOG=str(log)), produce, host_b)
    print(f"\nFIGURES wake-up (postgres, another host): enqueue to start {_ms(latencies)}")
    assert result.exit_code == 0, result.output
    assert [r["payload"]["n"] for r in _runs(log)] == [0, 1, 2]
    assert sleeps.woken >= 3


def test_postgres_wakes_the_drain_when_the_applications_transaction_commits(
    pg_db, tmp_path, no_polls, monkeypatch
):
    import psycopg

    import mq_cli

    log = tmp_path / "ran.jsonl"
    host_b = _another_host(pg_db, tmp_path)
    sleeps = Sleeps(monkeypatch)
    latencies: list[float] = []

    def produce() -> None:
        assert sleeps.now.wait(HANG), "the drain never waited"
        with psycopg.connect(pg_db.url, sslmode="disable") as conn:
            mq_cli.enqueue("q", {"n": 0}, connection=conn)
            time.sleep(1.0)
            assert _runs(log) == []  # not before the commit
            assert sleeps.woken == 0
            conn.commit()
            latencies.append(_latency(log, 0, time.time()))

    args = ["-q", "q", "--max-messages", "1"]
    result = drain_beside(pg_db, args, pg_db.env(MQ_TEST_LOG=str(log)), produce, host_b)
    print(f"\nFIGURES wake-up (postgres, at the commit): commit to start {_ms(latencies)}")
    assert result.exit_code == 0, result.output
    assert sleeps.woken == 1


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
