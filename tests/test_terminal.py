"""What a person at a terminal sees: progress on stderr, shell completion."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time


def _stderr_on_a_terminal(db, *args: str, input: bytes = b"") -> tuple[int, bytes]:
    """Run `python -m mq_cli ARGS` with stderr on a terminal: (exit code, what it showed)."""
    stdin = db.tmp / "stdin"
    stdin.write_bytes(input)
    master, slave = pty.openpty()
    try:
        # Popen and read as it runs: a terminal's buffer is small, and a process
        # writing more than it holds would wait for a reader.
        with stdin.open("rb") as source:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mq_cli", *args], stdin=source, stderr=slave,
                stdout=subprocess.DEVNULL, env=db.env(), cwd=db.tmp,
            )  # fmt: skip
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        proc.wait(timeout=120)
    finally:
        os.close(master)
    return proc.returncode, seen


def test_enqueue_shows_progress_on_a_terminal_only(sqlite_db):
    lines = "".join(f'{{"n": {i}}}\n' for i in range(2500)).encode()
    code, seen = _stderr_on_a_terminal(
        sqlite_db, "enqueue", "-q", "bulk", "--lines", "--silent", input=lines
    )
    assert code == 0
    assert b"enqueued to bulk: 2500" in seen
    # not a terminal (cron, pipes): nothing on stderr
    piped = subprocess.run(
        [sys.executable, "-m", "mq_cli", "enqueue", "-q", "bulk", "--lines", "--silent"],
        input=lines, capture_output=True, env=sqlite_db.env(), cwd=sqlite_db.tmp, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stderr == b""


def test_drain_shows_a_count_and_a_summary_on_a_terminal_only(sqlite_db, monkeypatch):
    monkeypatch.setenv("MQ_TEST_LOG", str(sqlite_db.tmp / "ran.jsonl"))
    payloads = [f'{{"n": {i}}}' for i in range(300)] + ['{"fail": true}']
    assert sqlite_db.run("enqueue", "-q", "jobs", *payloads).exit_code == 0
    code, seen = _stderr_on_a_terminal(
        sqlite_db, "drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked"
    )
    assert code == 0, seen
    assert b"drained 301 message(s): 300 succeeded, 1 failed, 0 returned in" in seen
    assert b"failed (attempt 1 of" in seen  # the failure's own line, as under cron
    # cron and pipes: no count, no summary (silent on success)
    assert sqlite_db.run("enqueue", "-q", "jobs", '{"n": 1}').exit_code == 0
    piped = sqlite_db.spawn("drain", "-q", "jobs", "--handler", "tests.jobs:fail_when_asked")
    out, err = piped.communicate(timeout=60)
    assert piped.returncode == 0 and out == b"" and err == b""


def test_bash_completion_script():
    env = dict(os.environ, _MQ_COMPLETE="bash_source")
    result = subprocess.run(
        [sys.executable, "-c", "from mq_cli.cli import main; main()"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert "complete" in result.stdout and "_mq_completion" in result.stdout


def test_drain_status_line_says_what_runs_and_keeps_clear_of_handler_output(sqlite_db):
    assert sqlite_db.run("enqueue", "-q", "jobs", '{"n": 1}').exit_code == 0
    handler = "exec:sh -c 'printf \"about to fail\" >&2; sleep 2.5; exit 1'"
    code, seen = _stderr_on_a_terminal(
        sqlite_db, "drain", "-q", "jobs", "--handler", handler, "--wait", "--max-seconds", "6"
    )
    assert code == 0, seen
    assert re.search(rb"queue jobs: running #1 for [12]s", seen), seen
    assert b"queue jobs: waiting for messages" in seen, seen
    # The handler's output and the failure's line each start on a line of their own
    # (the status line erased first), never inside the status line.
    at = seen.index(b"mq: queue jobs: message 1 failed")
    assert seen[:at].endswith((b"\r\x1b[K", b"\n")), seen[max(at - 80, 0) : at + 40]
    assert b"retry in" in seen and b"by the first drain that runs after" in seen
    # A Python handler's output too: on a line of its own, the status line drawn after it.
    assert (
        sqlite_db.run("enqueue", "-q", "jobs", '{"say": "about to", "sleep": 1.5}').exit_code == 0
    )
    code, seen = _stderr_on_a_terminal(
        sqlite_db, "drain", "-q", "jobs", "--handler", "tests.jobs:chatty", "--max-messages", "1"
    )
    assert code == 0, seen
    at = seen.index(b"about to")
    assert seen[:at].endswith((b"\r\x1b[K", b"\n")) and b"running #" in seen[:at], seen
    assert seen[at:].startswith(b"about to\r\n"), seen
    # cron: none of it
    assert sqlite_db.run("enqueue", "-q", "jobs", '{"n": 2}').exit_code == 0
    piped = sqlite_db.spawn("drain", "-q", "jobs", "--handler", "exec:cat")
    out, err = piped.communicate(timeout=120)
    assert piped.returncode == 0 and out == b"" and err == b""


def test_sigterm_says_what_the_drain_really_does(sqlite_db):
    # Idle (--wait, nothing to do): stopping is no news for cron's mail.
    idle = sqlite_db.spawn("drain", "-q", "jobs", "--handler", "exec:cat", "--wait")
    _wait_for_run(sqlite_db, idle)
    idle.send_signal(signal.SIGTERM)
    out, err = idle.communicate(timeout=120)
    assert idle.returncode == 0 and err == b"", err
    # A handler running: it is let finish, and that is said.
    assert sqlite_db.run("enqueue", "-q", "jobs", '{"n": 1}').exit_code == 0
    started = sqlite_db.tmp / "started"
    handler = f"exec:sh -c 'touch {started}; sleep 1'"
    busy = sqlite_db.spawn("drain", "-q", "jobs", "--handler", handler)
    deadline = time.monotonic() + 600
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    busy.send_signal(signal.SIGTERM)
    out, err = busy.communicate(timeout=120)
    assert busy.returncode == 0
    assert b"got SIGTERM: letting message 1's handler finish" in err, err
    assert json.loads(sqlite_db.run("stats", "--json").output) == {}  # it ran, and was deleted


def _wait_for_run(db, proc) -> None:
    """Until the drain ``proc`` holds its slot (it waits for messages by then)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for path in db.tmp.glob("xdg-runtime/mq/db-*/jobs.0.lock"):
            if path.read_text().split()[:1] == [str(proc.pid)]:
                return
        time.sleep(0.01)
    raise AssertionError("the drain never took its slot")
