"""The fence's edge (issue 50, item 3): which processes a handler started mq ends,
and when, with real drains, handlers and helpers.

The rule (handlers.md, guarantees.md): every process a handler started (found
by its MQ_FENCE mark and its session, fence.py) is ended when the handler
process that started it is stopped (a timeout, the fence of a lost session, the
guard) and, at the latest, when the drain ends, however it ends: normally,
busy or idle under kill -9. A Python handler's process runs every message of
its queue in the drain, so a helper message 0 started lives while later
messages run, and dies with that process. A helper started in a session of its
own and without MQ_FENCE in its environment is the handler's to keep: mq never
touches it.

Each handler starts a helper that leaves its session (``setsid``: a tunnel, an
ssh ControlMaster, a cache) and logs its pid; message "keep" starts it as the
docs say to keep one.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.proxy import Proxy
from tests.test_drain_outage import enqueue, ran, stderr_of, wait_for

EXEC_HANDLER = """#!/bin/sh
p=$(cat)
case "$p" in
  *keep*) env -u MQ_FENCE setsid sleep 300 & ;;
  *) setsid sleep 300 & ;;
esac
echo "{\\"payload\\": $p, \\"event\\": \\"helper\\", \\"helper\\": $!}" >> "$MQ_TEST_LOG"
case "$p" in *sleep*) sleep 60 ;; esac
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def helpers(log: Path) -> dict[object, int]:
    """Each message's helper pid, by its payload's k."""
    return {r["payload"]["k"]: r["helper"] for r in ran(log) if r.get("event") == "helper"}


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Helpers a test expects alive: killed at its end (they were started for it)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def configure(tmp_path: Path, kind: str, timeout: int = 0) -> None:
    handler = "tests.jobs:helper"
    if kind == "exec":
        script = tmp_path / "helper.sh"
        script.write_text(EXEC_HANDLER)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        handler = f"exec:{script}"
    (tmp_path / "mq.yaml").write_text(
        f"queues:\n  jobs: {{handler: '{handler}', batch_size: 1, timeout: {timeout}}}\n"
    )


def spawn(db, log: Path, err: Path, *args: str, url: str | None = None):
    env = db.env(MQ_TEST_LOG=str(log), **({"MQ_DATABASE_URL": url} if url else {}))
    with open(err, "wb") as errors:
        return db.spawn("drain", "-q", "jobs", *args, env=env, stderr=errors)


def assert_edge(log: Path, started: list[int], gone: list[object], why: str) -> None:
    """The helpers of messages ``gone`` die within seconds (a deadline that only
    catches a hang: a sweep takes milliseconds); "keep"'s lives on."""
    pids = helpers(log)
    started.extend(pids.values())
    for k in gone:
        wait_for(lambda k=k: not alive(pids[k]), 10, why=f"{why}: helper of {k} lives on")
    assert alive(pids["keep"]), f"{why}: the kept helper was killed"


@pytest.mark.parametrize("kind", ["python", "exec"])
def test_a_drain_that_ends_normally_ends_what_its_handlers_started(
    sqlite_db, tmp_path, started, kind
):
    db, log, err = sqlite_db, tmp_path / "ran.jsonl", tmp_path / "drain.err"
    assert db.run("init").exit_code == 0
    configure(tmp_path, kind)
    enqueue(db, "jobs", [{"k": 0}, {"k": "keep", "keep": True}])
    drain = spawn(db, log, err, "--json")
    out, _ = drain.communicate(timeout=60)
    assert drain.returncode == 0, stderr_of(err)
    assert json.loads(out)["succeeded"] == 2
    assert_edge(log, started, [0], "a normal end")


@pytest.mark.parametrize("kind", ["python", "exec"])
@pytest.mark.parametrize(
    "how", ["kill -9 idle", "kill -9 busy", "SIGSTOP busy", "two SIGTERMs busy"]
)
def test_a_drain_killed_or_stopped_ends_what_its_handlers_started(
    sqlite_db, tmp_path, started, kind, how
):
    db, log, err = sqlite_db, tmp_path / "ran.jsonl", tmp_path / "drain.err"
    assert db.run("init").exit_code == 0
    configure(tmp_path, kind)
    busy = how.endswith("busy")
    payloads: list[object] = [{"k": 0}, {"k": "keep", "keep": True}]
    if busy:
        payloads.append({"k": 2, "sleep": 60})
    enqueue(db, "jobs", payloads)
    drain = spawn(db, log, err, "--wait", "--max-seconds", "120")
    try:
        wait_for(lambda: len(helpers(log)) == len(payloads), 30, why=lambda: stderr_of(err))
        if not busy:  # both acknowledged: the drain waits, holding nothing
            wait_for(lambda: db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)])
            time.sleep(0.3)
        if how.startswith("kill -9"):
            drain.kill()
        elif how.startswith("SIGSTOP"):  # the guard fires when the handler's lease runs out
            drain.send_signal(signal.SIGSTOP)
        else:
            drain.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            drain.send_signal(signal.SIGTERM)
        assert_edge(log, started, [0, 2] if busy else [0], how)
    finally:
        drain.send_signal(signal.SIGCONT)
        drain.kill()
        drain.communicate()


def test_a_timeout_ends_the_handler_process_and_all_it_started(sqlite_db, tmp_path, started):
    """A Python handler's process runs every message: a timeout ends it, and with it
    what message 0 started, while the drain goes on."""
    db, log, err = sqlite_db, tmp_path / "ran.jsonl", tmp_path / "drain.err"
    assert db.run("init").exit_code == 0
    configure(tmp_path, "python", timeout=2)
    enqueue(db, "jobs", [{"k": 0}, {"k": "keep", "keep": True}, {"k": 2, "sleep": 60}])
    drain = spawn(db, log, err, "--wait", "--max-seconds", "120")
    try:
        wait_for(lambda: "timed out" in stderr_of(err), 30, why=lambda: stderr_of(err))
        assert_edge(log, started, [0, 2], "a timeout")
        assert drain.poll() is None  # the drain itself goes on
    finally:
        drain.kill()
        drain.communicate()


def test_an_exec_timeout_ends_its_program_and_all_it_started_only(sqlite_db, tmp_path, started):
    """Each `exec:` run is a handler process of its own: a timeout ends that run and
    what it started; what an earlier run left goes at the drain's end."""
    db, log, err = sqlite_db, tmp_path / "ran.jsonl", tmp_path / "drain.err"
    assert db.run("init").exit_code == 0
    configure(tmp_path, "exec", timeout=2)
    enqueue(db, "jobs", [{"k": 0}, {"k": "keep", "keep": True}, {"k": 2, "sleep": 60}])
    drain = spawn(db, log, err, "--wait", "--max-seconds", "120")
    try:
        wait_for(lambda: "timed out" in stderr_of(err), 30, why=lambda: stderr_of(err))
        assert_edge(log, started, [2], "an exec: timeout")
        assert alive(helpers(log)[0]) and drain.poll() is None
        drain.send_signal(signal.SIGTERM)
        assert drain.wait(timeout=60) == 0
        assert_edge(log, started, [0], "the drain's end after an exec: timeout")
    finally:
        drain.kill()
        drain.communicate()


@pytest.fixture(params=["mysql", "postgres"])
def proxied(request):
    db = request.getfixturevalue("mysql_db" if request.param == "mysql" else "pg_db")
    assert db.run("init").exit_code == 0
    s = parse_database_url(db.url)
    proxy = Proxy((s.host, s.port))
    scheme, user = ("postgresql", "postgres") if db.kind == "postgres" else ("mysql", "root")
    try:
        yield db, proxy, f"{scheme}://{s.user or user}@127.0.0.1:{proxy.port}/{s.database}"
    finally:
        proxy.close()


def test_a_lost_session_ends_the_handler_process_and_all_it_started(proxied, tmp_path, started):
    """The fence: cut from the database, the drain stops its running handler within
    FENCE (2 s), and what that handler's process started goes with it."""
    db, proxy, url = proxied
    log, err = tmp_path / "ran.jsonl", tmp_path / "drain.err"
    configure(tmp_path, "python")
    enqueue(db, "jobs", [{"k": 0}, {"k": "keep", "keep": True}, {"k": 2, "sleep": 60}])
    drain = spawn(db, log, err, "--wait", "--max-seconds", "120", url=url)
    try:
        wait_for(lambda: len(helpers(log)) == 3, 30, why=lambda: stderr_of(err))
        proxy.down()
        assert_edge(log, started, [0, 2], "a lost session")
    finally:
        proxy.up()
        drain.kill()
        drain.communicate()
