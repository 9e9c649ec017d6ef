"""Drain behaviour that belongs to processes: parallel drains, slots, signals,
kill -9, heartbeats and lost connections. Real `mq` processes throughout."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from mq_cli.backends.liveness import GRACE
from tests.proxy import Proxy


def wait_for(predicate, timeout: float = 600.0, every: float = 0.05):
    """Until ``predicate()`` holds; the deadline only catches a hang (a loaded machine
    may take long to start drains)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not reached in time")


def enqueue_many(db, queue: str, payloads: list[str]) -> list[int]:
    result = db.run("enqueue", "-q", queue, "--lines", input="\n".join(payloads) + "\n")
    assert result.exit_code == 0, result.output
    return [int(x) for x in result.stdout.split()]


def ran(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def status_counts(db, queue: str = "jobs") -> dict[str, int]:
    return dict(
        db.sql(
            "SELECT status, COUNT(*) FROM mq_messages WHERE queue = %s GROUP BY status", (queue,)
        )
    )


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "ran.jsonl"


def test_four_parallel_drains_run_each_message_exactly_once(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', concurrency: 4, batch_size: 20}\n"
    )
    # 5 ms a message: one drain alone would need 6 s, so on a loaded machine too
    # the others have started long before the work is done.
    payloads = [json.dumps({"n": i, "sleep": 0.005}) for i in range(1200)]
    ids = enqueue_many(db, "jobs", payloads)
    env = db.env(MQ_TEST_LOG=str(log))
    drains = [db.spawn("drain", "-q", "jobs", env=env) for _ in range(4)]
    for p in drains:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out == b"" and err == b""
    runs = ran(log)
    assert sorted(r["payload"]["n"] for r in runs) == list(range(1200))
    assert len(ids) == 1200 and status_counts(db) == {}
    # they really ran side by side: more than one worker process took messages
    assert len({r["pid"] for r in runs}) > 1


def test_busy_slots_exit_zero_silently(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:sleepy'}\n")
    enqueue_many(db, "jobs", ['{"sleep": 3}'])
    env = db.env(MQ_TEST_LOG=str(log))
    first = db.spawn("drain", "-q", "jobs", env=env)
    wait_for(lambda: status_counts(db).get("processing"))
    second = db.spawn("drain", "-q", "jobs", env=env)
    out, err = second.communicate(timeout=60)
    assert (second.returncode, out, err) == (0, b"", b"")
    first.communicate(timeout=20)
    assert first.returncode == 0
    assert len(ran(log)) == 1


def test_kill_9_leaves_the_message_processing_then_stalled(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', stalled_after: 1s, batch_size: 3}\n"
    )
    enqueue_many(db, "jobs", ['{"sleep": 30}', '{"sleep": 0}', '{"sleep": 0}'])
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log)))
    wait_for(lambda: status_counts(db).get("processing") == 3)
    drain.send_signal(signal.SIGKILL)
    drain.communicate(timeout=10)
    # nothing lost: all three still there, held by the dead drain ...
    assert status_counts(db) == {"processing": 3}
    # ... and, with no heartbeat any more, they show as stalled for an operator
    stats = wait_for(
        lambda: (s := json.loads(db.run("stats", "--json").stdout)["jobs"])["stalled"] == 3 and s
    )
    assert stats["processing"] == 0 and stats["ready"] == 0


def test_heartbeat_keeps_a_long_handler_from_looking_stalled(db, log, tmp_path):
    # stalled_after 4 s: heartbeats every 2 s, and the guard fences the handler
    # 3 s after the last one. A tighter setting lets a starved drain (a loaded
    # machine) miss its beat, and then fencing the handler is the right thing to do.
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', stalled_after: 4s}\n"
    )
    enqueue_many(db, "jobs", ['{"sleep": 6}'])
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log)))
    wait_for(lambda: status_counts(db).get("processing"))
    claimed = time.monotonic()
    seen, late = [], 0
    while drain.poll() is None:
        stats = json.loads(db.run("stats", "--json").stdout)["jobs"]
        seen.append(stats["stalled"])
        late += time.monotonic() - claimed > 4.5
        time.sleep(0.2)
    _, err = drain.communicate()
    assert drain.returncode == 0, err
    # Never stalled, and looked at well past stalled_after after the claim: a
    # heartbeat kept it live. (How many looks fit in is the machine's business.)
    assert set(seen) == {0} and late >= 1, err
    assert len(ran(log)) == 1, err


def started(log: Path, n: int) -> bool:
    """Whether the tests.jobs:alive handler of message ``n`` has started."""
    return any(r.get("event") == "start" and r["payload"]["n"] == n for r in ran(log))


def ended(log: Path) -> list[int]:
    """The messages whose tests.jobs:alive handler ran to its end."""
    return [r["payload"]["n"] for r in ran(log) if r.get("event") == "end"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_the_running_handler_and_returns_the_rest(db, log, tmp_path, sig):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', batch_size: 5}\n"
    )
    enqueue_many(db, "jobs", [json.dumps({"sleep": 1.5, "n": i}) for i in range(5)])
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log)))
    # The first handler runs (not a sleep of 0.3 s after the claim: a loaded
    # machine starts the handler child later than that).
    wait_for(lambda: started(log, 0), timeout=60)
    drain.send_signal(sig)
    out, err = drain.communicate(timeout=60)
    assert drain.returncode == 0, err
    # The running one finished (the first, or a next one if this test looked late),
    # none was cut short, and the others are back, not stalled.
    began = [r["payload"]["n"] for r in ran(log) if r.get("event") == "start"]
    assert ended(log) == began and began[0] == 0
    assert status_counts(db) == {"ready": 5 - len(began)}


def test_second_signal_stops_the_handler_at_once(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', batch_size: 3, retry_delay: 0}\n"
    )
    enqueue_many(db, "jobs", [json.dumps({"sleep": 60, "n": i}) for i in range(3)])
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log)))
    wait_for(lambda: started(log, 0), timeout=60)  # the first handler runs
    signalled = time.monotonic()
    drain.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    drain.send_signal(signal.SIGTERM)
    drain.communicate(timeout=60)
    assert time.monotonic() - signalled < 30  # stopped, not waited for (60 s)
    assert drain.returncode == 0
    assert ended(log) == []
    # nothing held any more: the interrupted one recorded as a failure, the rest back
    assert status_counts(db) == {"ready": 3}
    assert db.sql("SELECT SUM(error_count) FROM mq_messages")[0][0] == 1


def test_second_signal_while_the_handler_loads_gives_the_message_back(db, tmp_path):
    # Stopped before the handler could start: nothing ran, so nothing failed, and
    # a handler that was only slow to import is not reported as missing (exit 2).
    importing = tmp_path / "importing"
    enqueue_many(db, "jobs", ['{"n": 0}'])
    drain = db.spawn(
        "drain", "-q", "jobs", "--handler", "tests.blocked_import:step",
        env=db.env(MQ_TEST_IMPORTING=str(importing)),
    )  # fmt: skip
    wait_for(importing.exists, timeout=120)
    drain.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    drain.send_signal(signal.SIGTERM)
    _, err = drain.communicate(timeout=120)
    assert drain.returncode == 0, err
    assert b"could not be loaded" not in err
    assert db.sql("SELECT status, error_count FROM mq_messages") == [("ready", 0)]


def test_a_drain_with_nothing_to_run_never_imports_the_handler(db, tmp_path):
    # The handler's child starts while the drain connects, before anything is
    # claimed, but imports the handler only once the drain has a message for it:
    # a cron drain of an empty queue imports the handler's module only in its own
    # check of the path (tests/blocked_import.py does not block there), and
    # leaves no process behind.
    importing = tmp_path / "importing"
    drain = db.spawn(
        "drain", "-q", "jobs", "--handler", "tests.blocked_import:step", "--json",
        env=db.env(MQ_TEST_IMPORTING=str(importing)),
    )  # fmt: skip
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 0, err
    assert json.loads(out)["ended"] == "empty"
    assert not importing.exists()
    assert _processes_with(f"MQ_TEST_IMPORTING={importing}") == []


def test_a_drain_held_up_before_its_claim_never_imports_the_handler(sqlite_db, tmp_path):
    # The same, where the drain's child has long been up before the drain finds the
    # queue empty: another writer holds the file while the drain wants to claim.
    # Once the child waits on its pipe (or, as it used to, began the import), the
    # writer lets go.
    import sqlite3

    assert sqlite_db.run("init").exit_code == 0
    writer = sqlite3.connect(sqlite_db.url.split(":///", 1)[1], isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    importing = tmp_path / "importing"
    drain = sqlite_db.spawn(
        "drain", "-q", "jobs", "--handler", "tests.blocked_import:step", "--json",
        env=sqlite_db.env(MQ_TEST_IMPORTING=str(importing)),
    )  # fmt: skip

    def child_waits_or_imports() -> bool:
        children = set(_processes_with(f"MQ_TEST_IMPORTING={importing}")) - {drain.pid}
        return importing.exists() or any("pipe" in _wchan(pid) for pid in children)

    try:
        wait_for(child_waits_or_imports, timeout=120)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 0, err
    assert json.loads(out)["ended"] == "empty"
    assert not importing.exists()
    assert _processes_with(f"MQ_TEST_IMPORTING={importing}") == []


def _wchan(pid: int) -> str:
    """Where in the kernel ``pid`` waits ("anon_pipe_read": a read on a pipe)."""
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            return wchan.read()
    except OSError:
        return ""


def _processes_with(entry: str) -> list[int]:
    """The processes whose environment holds ``entry`` (NAME=value)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if entry.encode() in environ.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return found


#: the drain's words when its watchdog fenced the running handler (session.py)
FENCED = "lost the database session that showed this drain alive (no proof of it)"


def test_cut_connections_mid_drain_lose_nothing(mysql_db, log, tmp_path):
    """The connection drops while handlers run (as when MariaDB restarts): the
    drain reconnects to record the results; every message runs and is deleted."""
    db = mysql_db
    assert db.run("init").exit_code == 0
    settings = __import__("mq_cli.core.dburl", fromlist=["x"]).parse_database_url(db.url)
    proxy = Proxy((settings.host, settings.port))
    messages = 20
    try:
        url = f"mysql://{settings.user or 'root'}@127.0.0.1:{proxy.port}/{settings.database}"
        (tmp_path / "mq.yaml").write_text(
            "queues:\n  jobs: {handler: 'tests.jobs:sleepy', batch_size: 4}\n"
        )
        enqueue_many(db, "jobs", [json.dumps({"sleep": 0.3, "n": i}) for i in range(messages)])
        drain = db.spawn(
            "drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url)
        )

        def left() -> int:
            return sum(status_counts(db).values())

        # Each cut lands mid-drain, on a connection the drain has: not before its
        # first connect (a cut then meets no connection: the drain only waits for
        # the database), and the next only after it reconnected (an acknowledgement
        # landed since the last cut). Sleeps of 0.7 s once raced a loaded machine's
        # slow interpreter start (the drain then exited 3: it could not connect).
        wait_for(lambda: status_counts(db).get("processing"), timeout=60)
        for _ in range(3):
            assert drain.poll() is None, drain.communicate()[1]
            before = left()
            assert before > 0, "the drain finished before all cuts landed"
            proxy.down()  # like a server restart: connections drop, new ones refused
            time.sleep(1.0)
            proxy.up()
            # Reconnected: it acknowledged (or it exited, which the next round reports).
            wait_for(lambda b=before: left() < b or drain.poll() is not None, timeout=60)
        out, err = drain.communicate(timeout=60)
        assert drain.returncode == 0, err
        assert proxy.cuts == 3
        if FENCED.encode() in err:
            # A loaded machine kept it from showing its session alive for
            # liveness.FENCE (2 s) while a handler ran (1 s down, then reconnects
            # that came late): the watchdog stopped that handler and the drain went
            # on under a new owner token (issue 32; before, it exited 3 here though
            # gc had taken nothing). The stopped run's message stays processing for
            # gc, as README says: requeued and run again, nothing lost.
            assert b"going on with new claims" in err and b"Traceback" not in err, err

            def requeued() -> bool:
                result = db.run("gc", "--stalled", "--requeue")
                assert result.exit_code == 0, result.output
                return "processing" not in status_counts(db)

            wait_for(requeued, timeout=60)  # once the server saw its session end
            time.sleep(GRACE)  # a dead drain's messages are ready GRACE after the requeue
            again = db.run("drain", "-q", "jobs", env={"MQ_TEST_LOG": str(log)})
            assert again.exit_code == 0, again.output
        assert sorted({r["payload"]["n"] for r in ran(log)}) == list(range(messages))
        assert status_counts(db) == {}
    finally:
        proxy.close()


def test_database_gone_for_good_exits_3_and_leaves_messages_for_gc(mysql_db, log, tmp_path):
    db = mysql_db
    assert db.run("init").exit_code == 0
    settings = __import__("mq_cli.core.dburl", fromlist=["x"]).parse_database_url(db.url)
    proxy = Proxy((settings.host, settings.port))
    try:
        url = f"mysql://{settings.user or 'root'}@127.0.0.1:{proxy.port}/{settings.database}"
        (tmp_path / "mq.yaml").write_text(
            "queues:\n  jobs: {handler: 'tests.jobs:sleepy', batch_size: 2}\n"
        )
        enqueue_many(db, "jobs", ['{"sleep": 1, "n": 0}', '{"sleep": 0, "n": 1}'])
        drain = db.spawn(
            "drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url)
        )
        wait_for(lambda: status_counts(db).get("processing") == 2)
        proxy.down()
        out, err = drain.communicate(timeout=60)
        assert drain.returncode == 3
        text = err.decode()
        assert "Traceback" not in text
        assert "gc --stalled" in text
        # the messages are still there, held by the dead drain: stalled later, never lost
        assert status_counts(db) == {"processing": 2}
    finally:
        proxy.close()


def test_drain_from_a_bare_cron_environment(db, log, tmp_path):
    """cron runs jobs with a minimal environment: no HOME-based XDG vars, a bare PATH."""
    # No XDG_RUNTIME_DIR under cron: the slots are in ~/.local/state/mq/locks,
    # not in shared /tmp (where another user could take /tmp/mq-<uid> first).
    queue = f"cron-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / "mq.yaml").write_text(f"queues:\n  {queue}: {{handler: 'tests.jobs:record'}}\n")
    enqueue_many(db, queue, ['"a"', '"b"'])
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SHELL": "/bin/sh",
        "MQ_DATABASE_URL": db.url,
        "MQ_TEST_LOG": str(log),
        "PYTHONPATH": db.env()["PYTHONPATH"],
    }
    with open(os.devnull) as devnull:
        drain = db.spawn("drain", env=env, stdin=devnull)
        out, err = drain.communicate(timeout=30)
    assert (drain.returncode, out, err) == (0, b"", b"")
    assert [r["payload"] for r in ran(log)] == ["a", "b"]
    locks = tmp_path / ".local" / "state" / "mq" / "locks"
    # The database's directory, with the queue's slot and the note naming the
    # database (host/slots.py), and on SQLite the directory of the drains' own lock files
    # (liveness.py): the drain took its file away as it ended.
    (mine,) = [p for p in locks.iterdir() if p.name.startswith("db-")]
    expected = [mine.name, "drains"] if db.kind == "sqlite" else [mine.name]
    assert sorted(p.name for p in locks.iterdir()) == sorted(expected)
    assert sorted(p.name for p in mine.iterdir()) == sorted(["database", f"{queue}.0.lock"])
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    if db.kind == "sqlite":
        assert list((locks / "drains").iterdir()) == []
        assert stat.S_IMODE((locks / "drains").stat().st_mode) == 0o700
    assert not Path(f"/tmp/mq-{os.getuid()}", f"{queue}.0.lock").exists()


# -- one command, every slot: --processes --------------------------------------------


def test_processes_0_fills_every_slot_and_sums_the_reports(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', concurrency: 3, batch_size: 2}\n"
    )
    enqueue_many(db, "jobs", [json.dumps({"n": i, "sleep": 0.15}) for i in range(90)])
    parent = db.spawn("drain", "-q", "jobs", "--processes", "0", "--json",
                      env=db.env(MQ_TEST_LOG=str(log)))  # fmt: skip
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 0, err
    report = json.loads(out)
    assert report["processes"] == 3
    assert (report["claimed"], report["succeeded"], report["failed"]) == (90, 90, 0)
    assert report["queues"] == ["jobs"] and report["busy"] == []
    runs = ran(log)
    assert sorted(r["payload"]["n"] for r in runs) == list(range(90))
    assert len({r["pid"] for r in runs}) == 3  # three drains, side by side
    assert status_counts(db) == {}


def test_more_processes_than_slots_leave_the_rest_busy(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', concurrency: 2}\n"
    )
    enqueue_many(db, "jobs", [json.dumps({"n": i, "sleep": 0.05}) for i in range(20)])
    parent = db.spawn("drain", "-q", "jobs", "--processes", "5",
                      env=db.env(MQ_TEST_LOG=str(log)))  # fmt: skip
    out, err = parent.communicate(timeout=120)
    assert (parent.returncode, out, err) == (0, b"", b"")  # silent, as a cron drain
    assert sorted(r["payload"]["n"] for r in ran(log)) == list(range(20))
    assert len({r["pid"] for r in ran(log)}) <= 2


def test_processes_report_the_worst_exit_code_and_refuse_max_messages(db, tmp_path):
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'no.such.module:f'}\n")
    enqueue_many(db, "jobs", ['{"n": 1}'])
    parent = db.spawn("drain", "--processes", "2")
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 2, err
    assert b"no.such.module" in err and b"Traceback" not in err
    refused = db.run("drain", "-q", "jobs", "--processes", "2", "--max-messages", "5")
    assert refused.exit_code == 2 and "--max-seconds" in refused.stderr
    assert status_counts(db) == {"ready": 1}


def test_sigterm_reaches_every_drain(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:sleepy', concurrency: 2, batch_size: 5}\n"
    )
    # 2 s each: one drain alone takes 40 s for all, time enough for the second
    # to start on a loaded machine.
    enqueue_many(db, "jobs", [json.dumps({"n": i, "sleep": 2}) for i in range(20)])
    parent = db.spawn("drain", "-q", "jobs", "--processes", "0", "--json",
                      env=db.env(MQ_TEST_LOG=str(log)))  # fmt: skip
    # Both drains hold a batch (two owners): not "10 processing", which needs their
    # batches to overlap whole, and a loaded machine may start them seconds apart.
    owners = "SELECT COUNT(DISTINCT owner) FROM mq_messages WHERE status = 'processing'"
    wait_for(lambda: parent.poll() is not None or db.sql(owners)[0][0] >= 2)
    assert parent.poll() is None, "the drains ended before both held a batch"
    done_before = len(ran(log))
    parent.send_signal(signal.SIGTERM)
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == 0, err
    report = json.loads(out)
    # Each drain finished its running one (and one that ended as we looked), no more.
    assert report["succeeded"] == len(ran(log)) <= done_before + 4
    assert report["claimed"] >= 10  # both drains held a batch when the signal came
    assert report["returned"] == report["claimed"] - report["succeeded"]
    assert status_counts(db) == {"ready": 20 - report["succeeded"]}
