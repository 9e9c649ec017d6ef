"""`mq stop DRAIN [--quiet]`: real drains on SQLite, MariaDB and PostgreSQL, asked through
the database to stop (as SIGTERM) or to end after what they claimed; the run log says so."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
from pathlib import Path

from tests.webconsole import wait_for

HANDLER = "tests.handlers:step"
#: a drain ends within this after a request: a deadline that only catches a hang
HANG = 60


def _config(tmp: Path, batch_size: int, concurrency: int = 1) -> None:
    (tmp / "mq.yaml").write_text(
        f"defaults: {{stalled_after: 6s, batch_size: {batch_size}, concurrency: {concurrency}}}\n"
        f"queues:\n  jobs: {{handler: '{HANDLER}'}}\n"
    )


def _enqueue(db, tmp: Path, count: int, sleep: float, hold: bool = False) -> list[int]:
    """``count`` steps that sleep ``sleep`` seconds; with ``hold`` the first runs until
    the test releases it (:func:`_release_once`), so a request reaches its drain while
    it runs however slow the machine is."""
    steps = [json.dumps({"n": n, "file": str(tmp / "ran.jsonl"), "sleep": sleep,
                         **({"until": str(tmp / "release")} if hold and n == 1 else {})})
             for n in range(1, count + 1)]  # fmt: skip
    result = db.run("enqueue", "-q", "jobs", *steps)
    assert result.exit_code == 0, result.output
    return [int(line) for line in result.stdout.split()]


def _spawn(db, tmp: Path, *args: str) -> subprocess.Popen:
    """A drain whose log (-v: a quiet request is said at info level) goes to a file."""
    with open(tmp / "drain.err", "wb") as err:
        return db.spawn("-v", "drain", *args, stderr=err)


def _release_once(tmp: Path, said: str) -> None:
    """Once the drain's log says ``said`` (it read the request), its first message ends."""
    log = tmp / "drain.err"
    wait_for(lambda: said in log.read_text(errors="replace"), f"the drain to say {said!r}")
    (tmp / "release").touch()


#: what a drain says when it reads a request
SAYS_STOP = "got a stop request from"
SAYS_QUIET = "to end quietly (mq stop --quiet)"


def _ran(tmp: Path) -> list[int]:
    path = tmp / "ran.jsonl"
    return (
        [json.loads(line)["n"] for line in path.read_text().splitlines()] if path.exists() else []
    )


def _status(db) -> dict:
    result = db.run("status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _live(db, pid: int, running: bool = False) -> dict | None:
    """The live drain of process ``pid`` in `mq status --json` (running a message)."""
    for drain in _status(db)["drains"]:
        if drain["pid"] == pid and (drain["running"] or not running):
            return drain
    return None


def _ended(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, (err or b"").decode()
    return json.loads(out)


def _run(db, pid: int) -> dict:
    [run] = [r for r in _status(db)["runs"] if r["pid"] == pid]
    return run


def _ids(db, status: str) -> list[int]:
    result = db.run("list", "-q", "jobs", "--status", status, "--json")
    assert result.exit_code == 0, result.output
    return [m["id"] for m in json.loads(result.stdout)]


ME = f"{getpass.getuser()}@{socket.gethostname()}"


def test_stop_is_a_sigterm_through_the_database(db, tmp_path):
    _config(tmp_path, batch_size=3)
    first, *rest = _enqueue(db, tmp_path, 3, sleep=1, hold=True)
    proc = _spawn(db, tmp_path, "-q", "jobs", "--json")
    drain = wait_for(lambda: _live(db, proc.pid, running=True), "the drain running a message")
    name = f"{drain['host']}:{drain['pid']}"
    assert name in db.run("status").stdout  # the name `mq stop` takes
    asked = db.run("stop", name)
    assert asked.exit_code == 0, asked.output
    assert f"asked drain {name} (queue jobs) to stop" in asked.stdout
    _release_once(tmp_path, SAYS_STOP)
    report = _ended(proc)
    # The running handler finished; the two it claimed and did not start are ready.
    assert (report["succeeded"], report["returned"], report["ended"]) == (1, 2, "stop")
    assert _ran(tmp_path) == [1]
    assert _ids(db, "ready") == rest and first not in _ids(db, "processing")
    run = _run(db, proc.pid)
    assert (run["exit_code"], run["ended"], run["returned"]) == (0, "stop", 2)
    assert run["stop_request"]["kind"] == "stop" and run["stop_request"]["by"] == ME
    assert f"0 (stop: {ME})" in db.run("status").stdout
    # Asked again once it ended: nothing to stop (exit 2), nothing changed.
    again = db.run("stop", name)
    assert again.exit_code == 2 and "ended at" in again.stderr
    assert _ids(db, "ready") == rest


def test_quiet_runs_what_it_claimed_and_claims_no_more(db, tmp_path):
    _config(tmp_path, batch_size=2)
    ids = _enqueue(db, tmp_path, 3, sleep=1, hold=True)
    proc = _spawn(db, tmp_path, "-q", "jobs", "--json")
    drain = wait_for(lambda: _live(db, proc.pid, running=True), "the drain running a message")
    asked = db.run("stop", drain["owner"], "--quiet", "--json")  # by its owner token too
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.stdout)
    shown = db.run("status").stdout  # while it runs what it claimed
    assert f"{drain['host']}:{drain['pid']}: asked to end quietly by {ME}" in shown
    assert (answer["drain"], answer["request"], answer["by"]) == (
        f"{drain['host']}:{drain['pid']}", "quiet", ME,
    )  # fmt: skip
    _release_once(tmp_path, SAYS_QUIET)
    report = _ended(proc)
    assert (report["claimed"], report["succeeded"], report["returned"]) == (2, 2, 0)
    assert report["ended"] == "quiet"
    assert _ran(tmp_path) == [1, 2]  # each once
    assert _ids(db, "ready") == ids[2:]
    run = _run(db, proc.pid)
    assert run["ended"] == "quiet" and run["stop_request"]["kind"] == "quiet"


def test_quiet_ends_an_idle_waiting_drain(db, tmp_path):
    _config(tmp_path, batch_size=1)
    proc = db.spawn("drain", "-q", "jobs", "--wait", "--max-seconds", "300", "--json")
    drain = wait_for(lambda: _live(db, proc.pid), "the waiting drain in mq status")
    assert drain["running"] is None and drain["held"] == 0
    asked = db.run("stop", f"{drain['host']}:{drain['pid']}", "--quiet")
    assert asked.exit_code == 0, asked.output
    report = _ended(proc)
    assert (report["claimed"], report["ended"]) == (0, "quiet")
    assert _run(db, proc.pid)["ended"] == "quiet"


def test_a_request_names_one_process_of_processes(db, tmp_path):
    _config(tmp_path, batch_size=1, concurrency=2)
    proc = db.spawn("drain", "-q", "jobs", "--processes", "2", "--wait", "--max-seconds", "300")

    def two() -> list[dict]:
        drains = [d for d in _status(db)["drains"] if d["queue"] == "jobs"]
        return drains if len(drains) == 2 else []

    first, second = wait_for(two, "two drain processes in mq status")
    assert db.run("stop", f"{first['host']}:{first['pid']}").exit_code == 0
    wait_for(lambda: _live(db, first["pid"]) is None, "the first process to end")
    assert _live(db, second["pid"]) is not None  # the other goes on
    assert _run(db, first["pid"])["ended"] == "stop"
    assert db.run("stop", f"{second['host']}:{second['pid']}", "--quiet").exit_code == 0
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err.decode()
    assert _run(db, second["pid"])["ended"] == "quiet"


def test_an_unknown_drain_is_a_usage_error(db, tmp_path):
    _config(tmp_path, batch_size=1)
    result = db.run("stop", "nowhere:1")
    assert result.exit_code == 2
    assert "no live drain is named 'nowhere:1'" in result.stderr and "live drains: none" in (
        result.stderr
    )
    assert db.run("stop", "").exit_code == 2
    assert "Example:" in db.run("stop", "--help").stdout


def test_init_migrates_a_version_4_run_log(db, tmp_path):
    """Schema 5 adds the runs' columns for `mq stop`; the runs recorded before stay."""
    from mq_cli.backends.sqlrunlog import ADDED_IN_5

    _config(tmp_path, batch_size=1)
    _enqueue(db, tmp_path, 1, sleep=0)
    assert db.run("drain", "-q", "jobs").exit_code == 0
    for column in ADDED_IN_5:
        db.sql(f"ALTER TABLE mq_messages_runs DROP COLUMN {column}")
    db.sql("UPDATE mq_messages_meta SET value = '4' WHERE name = 'schema_version'")
    if db.kind != "sqlite":  # SQLite migrates itself on first use
        refused = db.run("status")
        assert refused.exit_code == 3 and "adds the run log's columns for mq stop" in (
            refused.stderr
        )
        result = db.run("init")
        assert result.exit_code == 0, result.output
        assert (
            "migrated 4 -> 5: added column(s) stop_request, stop_by, stop_at, end_reason to "
            "mq_messages_runs" in result.stdout
        )
    [run] = _status(db)["runs"]
    assert (run["exit_code"], run["succeeded"], run["ended"], run["stop_request"]) == (
        0, 1, None, None,
    )  # fmt: skip
    assert db.run("init").stdout.count("migrated") == 0


def test_a_stop_outranks_a_quiet_and_a_quiet_never_undoes_a_stop(db, tmp_path):
    _config(tmp_path, batch_size=3)
    first, *rest = _enqueue(db, tmp_path, 3, sleep=1, hold=True)
    proc = _spawn(db, tmp_path, "-q", "jobs", "--json")
    drain = wait_for(lambda: _live(db, proc.pid, running=True), "the drain running a message")
    name = f"{drain['host']}:{drain['pid']}"
    assert db.run("stop", name, "--quiet").exit_code == 0
    assert db.run("stop", name).exit_code == 0
    again = db.run("stop", name, "--quiet")
    assert again.exit_code == 0 and f"was asked to stop already (by {ME})" in again.stdout
    _release_once(tmp_path, SAYS_STOP)
    report = _ended(proc)
    assert (report["succeeded"], report["returned"], report["ended"]) == (1, 2, "stop")
    assert _ids(db, "ready") == rest and _ran(tmp_path) == [1]
    assert _run(db, proc.pid)["stop_request"]["kind"] == "stop"
