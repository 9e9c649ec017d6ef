"""A killed drain's messages come back in seconds: each drain holds a lock that dies
with it (liveness.py), and a live drain is never taken for dead."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mq_cli.backends.liveness import FENCE, GRACE
from mq_cli.core.dburl import parse_database_url
from mq_cli.drain.session import RECONNECT_FOR
from mq_cli.host.runlog import LIVE_WITHIN
from tests.proxy import Proxy

LOG = "runs.jsonl"
#: the queue's stalled_after: a heartbeat would call its drain dead only after this,
#: so anything sooner is the lock's doing. Deadlines below are far shorter (they
#: only catch a hang); the seconds themselves are figures (bench/README.md, "Timings").
STALLED_AFTER = 3600.0
HANG = 60.0


def config(tmp_path: Path) -> None:
    (tmp_path / "mq.yaml").write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n  jobs: {handler: 'tests.jobs:alive', stalled_after: 1h, batch_size: 3,"
        " requeue_stalled: true, max_errors: 5,"
        " concurrency: 2}\n"
    )


def waiting(tmp_path: Path, drain: subprocess.Popen) -> bool:
    """Whether ``drain`` (--wait) is in its loop: its wake-up FIFO exists."""
    return any((tmp_path / "locks").glob(f"db-*/wake/jobs.{drain.pid}"))


def runs(tmp_path: Path) -> list[dict]:
    path = tmp_path / LOG
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def stats(db) -> dict:
    result = db.run("stats", "-q", "jobs", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["jobs"]


def wait_for(check, timeout: float, what: str) -> float:
    """Seconds until ``check()`` held."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - started


def start_holding_drain(db, tmp_path: Path, count: int = 3) -> subprocess.Popen:
    """A drain running long handlers on ``count`` messages it claimed."""
    payloads = "\n".join(json.dumps({"k": f"m{i}", "sleep": 60}) for i in range(count))
    result = db.run("enqueue", "-q", "jobs", "--lines", input=payloads + "\n")
    assert result.exit_code == 0, result.output
    drain = db.spawn("drain", "-q", "jobs", env=db.env(MQ_TEST_LOG=str(tmp_path / LOG)))
    wait_for(lambda: any(r["event"] == "start" for r in runs(tmp_path)), 20, "the drain ran")
    return drain


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)


def test_a_live_drain_is_not_stalled(db, tmp_path):
    config(tmp_path)
    drain = start_holding_drain(db, tmp_path)
    try:
        time.sleep(FENCE + 0.5)
        counts = stats(db)
        assert (counts["processing"], counts["stalled"]) == (3, 0)
        result = db.run("gc", "--stalled", "--requeue", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []
        assert db.sql("SELECT COUNT(*) FROM mq_messages WHERE status = 'processing'") == [(3,)]
    finally:
        kill(drain)


def test_a_waiting_drain_runs_a_killed_drains_messages_again_long_before_stalled_after(
    db, tmp_path
):
    """With stalled_after an hour, only the dead drain's free lock lets the waiting
    drain requeue its messages: that they run again at all shows it. (Whether they
    are listed stalled first is not looked at here: the waiting drain may requeue
    them before any look; the gc test below lists them.)"""
    config(tmp_path)
    holder = start_holding_drain(db, tmp_path)
    # A waiting drain with requeue_stalled, already running (as under cron with
    # --wait), with a quick handler this time. SIGTERM ends it.
    waiting_drain = db.spawn(
        "drain", "-q", "jobs", "--wait", "--max-seconds", str(10 * HANG),
        "--handler", "tests.jobs:record",
        env=db.env(MQ_TEST_LOG=str(tmp_path / "again.jsonl")),
    )  # fmt: skip
    try:
        wait_for(lambda: waiting(tmp_path, waiting_drain), HANG, "the waiting drain is up")
        killed = time.monotonic()
        kill(holder)
        again = tmp_path / "again.jsonl"
        wait_for(lambda: again.exists() and len(again.read_text().splitlines()) == 3, HANG, "rerun")
        ran_again = time.monotonic() - killed
    except AssertionError:
        waiting_drain.send_signal(signal.SIGTERM)
        print(waiting_drain.communicate(timeout=30))
        raise
    finally:
        waiting_drain.send_signal(signal.SIGTERM)
        out, err = waiting_drain.communicate(timeout=30)
        kill(holder)
    print(f"\nFIGURES liveness ({db.kind}): ran again after {ran_again:.2f} s")
    assert ran_again < HANG < STALLED_AFTER
    assert waiting_drain.returncode == 0, err
    assert b"requeued 3 stalled message(s)" in err
    assert sorted(json.loads(line)["payload"]["k"] for line in again.read_text().splitlines()) == [
        "m0", "m1", "m2",
    ]  # fmt: skip
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_gc_lists_a_killed_drains_messages_at_once_and_requeues_them_after_the_grace(db, tmp_path):
    config(tmp_path)
    kill(start_holding_drain(db, tmp_path))
    killed = time.monotonic()

    def status() -> dict:
        return json.loads(db.run("status", "--json").stdout)

    # Its lock is free: gone from `status` long before LIVE_WITHIN (90 s), and its
    # messages stalled long before stalled_after (1 h).
    wait_for(lambda: status()["drains"] == [], HANG, "the killed drain left status")
    assert [r["state"] for r in status()["runs"]] == ["vanished"]
    wait_for(lambda: stats(db)["stalled"] == 3, HANG, "listed stalled")
    seen = time.monotonic() - killed
    print(f"\nFIGURES liveness ({db.kind}): listed stalled {seen:.2f} s after the kill")
    assert seen < HANG < min(LIVE_WITHIN, STALLED_AFTER)
    listed = db.run("gc", "--stalled", "--json")
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == 3
    requeued = db.run("gc", "--stalled", "--requeue")
    assert requeued.exit_code == 0, requeued.output
    listing = db.run("list", "-q", "jobs", "--json")
    assert [m["status"] for m in json.loads(listing.stdout)] == ["ready"] * 3
    note = db.sql("SELECT last_error FROM mq_messages")[0][0]
    assert "lock was free" in note
    # Not before the grace: the dead drain's handler must surely be over. Stored
    # `delayed` until GRACE after the requeue (a heartbeat's stalled message would be
    # `ready` at once), whenever a drain looks.
    assert db.sql("SELECT status FROM mq_messages") == [("delayed",)] * 3
    time.sleep(GRACE)
    later = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:noop")
    assert later.exit_code == 0, later.output
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def drain_through_a_proxy(db, tmp_path: Path, sleep: float) -> tuple[Proxy, subprocess.Popen]:
    """A drain reaching the server through a proxy the test can cut, running one
    message whose handler takes ``sleep`` seconds."""
    config(tmp_path)
    settings = parse_database_url(db.url)
    proxy = Proxy((settings.host, settings.port))
    scheme, user = ("postgresql", "postgres") if db.kind == "postgres" else ("mysql", "root")
    proxied = f"{scheme}://{settings.user or user}@127.0.0.1:{proxy.port}/{settings.database}"
    result = db.run("enqueue", "-q", "jobs", input=json.dumps({"k": "m0", "sleep": sleep}))
    assert result.exit_code == 0, result.output
    holder = db.spawn(
        "drain", "-q", "jobs",
        env=db.env(MQ_TEST_LOG=str(tmp_path / LOG), MQ_DATABASE_URL=proxied),
    )  # fmt: skip
    try:
        wait_for(lambda: any(r["event"] == "start" for r in runs(tmp_path)), 20, "the drain ran")
    except AssertionError:
        kill(holder)
        proxy.close()
        raise
    return proxy, holder


@pytest.mark.parametrize("db", ["mysql", "postgres"], indirect=True)
def test_a_drain_cut_off_from_its_database_stops_its_handler_before_the_message_runs_again(
    db, tmp_path
):
    """The drain's link to the server is cut and stays down while gc runs: its lock
    is free, so gc takes its message; the drain must have stopped its handler
    before the message runs again elsewhere, and exit 3."""
    proxy, holder = drain_through_a_proxy(db, tmp_path, sleep=60)
    try:
        proxy.down()  # cut, and no reconnect gets through
        cut = time.time()
        requeued = db.run("gc", "--stalled", "--requeue")
        assert requeued.exit_code == 0, requeued.output
        assert "requeued 1" in requeued.output, requeued.output
        again = db.run(
            "drain", "-q", "jobs", "--wait", "--max-seconds", str(GRACE + 2),
            "--handler", "tests.jobs:record_time",
            env={"MQ_TEST_LOG": str(tmp_path / "again.jsonl")},
        )  # fmt: skip
        assert again.exit_code == 0, again.output
        out, err = holder.communicate(timeout=40)
    finally:
        kill(holder)
        proxy.close()
    first = runs(tmp_path)
    last_alive = max(r["at"] for r in first)
    (second,) = [json.loads(line) for line in (tmp_path / "again.jsonl").read_text().splitlines()]
    assert not any(r["event"] == "end" for r in first)
    assert last_alive < second["t"], "the first run was still going when the second started"
    # Stopped by the fence (FENCE after its last proof: a figure, bench/README.md),
    # not when the drain gave up reconnecting.
    print(
        f"\nFIGURES fence ({db.kind}): the handler stopped {last_alive - cut:.2f} s after the cut"
    )
    assert last_alive - cut < RECONNECT_FOR
    assert holder.returncode == 3, err
    assert b"gc --stalled" in err and b"Traceback" not in err


@pytest.mark.parametrize("db", ["mysql", "postgres"], indirect=True)
def test_a_drain_whose_connection_is_cut_takes_its_lock_back_and_finishes(db, tmp_path):
    """A cut that heals at once is no death: gc meanwhile leaves the message alone,
    and the drain finishes it (exit 0), run once."""
    proxy, holder = drain_through_a_proxy(db, tmp_path, sleep=4)
    try:
        proxy.cut()
        requeued = db.run("gc", "--stalled", "--requeue", "--json")
        assert requeued.exit_code == 0, requeued.output
        assert json.loads(requeued.stdout) == []
        out, err = holder.communicate(timeout=40)
    finally:
        kill(holder)
        proxy.close()
    assert holder.returncode == 0, err
    assert [r["event"] for r in runs(tmp_path)].count("end") == 1
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_list_and_show_tell_the_running_message_from_those_waiting_in_the_batch(db, tmp_path):
    config(tmp_path)
    drain = start_holding_drain(db, tmp_path)
    try:

        def listed() -> list[dict]:
            result = db.run("list", "-q", "jobs", "--json")
            assert result.exit_code == 0, result.output
            return json.loads(result.stdout)

        # A message shows as running once it has run a second (runlog.RUNNING_AFTER)
        # and the drain wrote so, at its next tick.
        wait_for(lambda: any(m["activity"] == "running" for m in listed()), 15, "running shown")
        messages = listed()
        assert [m["activity"] for m in messages] == ["running", "waiting", "waiting"]
        assert messages[0]["running_seconds"] >= 1.0
        assert {m["state"] for m in messages} == {"processing"}
        table = db.run("list", "-q", "jobs")
        assert "running " in table.stdout and table.stdout.count("waiting") == 2
        shown = db.run("show", str(messages[0]["id"]))
        assert "(running for " in shown.stdout
        shown = json.loads(db.run("show", str(messages[1]["id"]), "--json").stdout)
        assert (shown["activity"], shown["running_seconds"]) == ("waiting", None)
    finally:
        kill(drain)


@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_heartbeat_only_drain_whose_writes_stalled_past_stalled_after_stops_with_exit_3(
    db, tmp_path
):
    """A drain that heartbeats alone shows alive (here behind a transaction pooler;
    on Galera alike) and whose writes stall past stalled_after (a cluster's view
    change) is taken for dead by gc. When its writes go through again it finds
    that out, says so and exits 3, so the run again elsewhere is explained; the
    guard had ended its handler before gc could take the message."""
    stalled_after = 2.0
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', stalled_after: 2s, batch_size: 1}\n"
    )
    settings = parse_database_url(db.url)
    proxy = Proxy((settings.host, settings.port))
    proxied = (
        f"postgresql://{settings.user or 'postgres'}@127.0.0.1:{proxy.port}/"
        f"{settings.database}?pooler=transaction"
    )
    result = db.run("enqueue", "-q", "jobs", input=json.dumps({"k": "m0", "sleep": 60}))
    assert result.exit_code == 0, result.output
    holder = db.spawn(
        "drain", "-q", "jobs",
        env=db.env(MQ_TEST_LOG=str(tmp_path / LOG), MQ_DATABASE_URL=proxied),
    )  # fmt: skip
    try:
        wait_for(lambda: any(r["event"] == "start" for r in runs(tmp_path)), 20, "the drain ran")
        proxy.stall()
        stalled = time.time()
        # gc takes the message once its heartbeat is stalled_after old: the event is
        # made to happen, not hoped for (a loaded machine only makes it later).
        time.sleep(stalled_after)
        deadline = time.monotonic() + 10 * stalled_after
        while True:
            requeued = db.run("gc", "--stalled", "--requeue")
            assert requeued.exit_code == 0, requeued.output
            if "requeued 1" in requeued.output:
                break
            assert time.monotonic() < deadline, requeued.output
            time.sleep(0.2)
        taken = time.time()
        proxy.flow()
        out, err = holder.communicate(timeout=60)
    finally:
        kill(holder)
        proxy.close()
    first = runs(tmp_path)
    assert not any(r["event"] == "end" for r in first), "the handler ran on after gc took it"
    assert max(r["at"] for r in first) < taken  # the guard ended it before gc took it
    print(
        f"\nFIGURES guard: the handler stopped {max(r['at'] for r in first) - stalled:.2f} s "
        f"after the stall (stalled_after {stalled_after:g} s)"
    )
    assert holder.returncode == 3, err
    assert b"heartbeats could not be written" in err and b"Traceback" not in err
    assert err.count(b"\n") <= 5, err
    again = db.run("drain", "-q", "jobs", "--handler", "tests.jobs:noop")
    assert again.exit_code == 0, again.output
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]
