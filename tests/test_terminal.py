"""What a person at a terminal sees: progress on stderr, shell completion."""

from __future__ import annotations

import os
import pty
import subprocess
import sys


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
