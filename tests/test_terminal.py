"""What a person at a terminal sees: progress on stderr, shell completion."""

from __future__ import annotations

import os
import pty
import subprocess
import sys


def test_enqueue_shows_progress_on_a_terminal_only(sqlite_db):
    lines = "".join(f'{{"n": {i}}}\n' for i in range(2500)).encode()
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mq_cli", "enqueue", "-q", "bulk", "--lines", "--silent"],
            input=lines, stderr=slave, stdout=subprocess.DEVNULL,
            env=sqlite_db.env(), cwd=sqlite_db.tmp, timeout=60,
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
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert b"enqueued to bulk: 2500" in seen
    # not a terminal (cron, pipes): nothing on stderr
    piped = subprocess.run(
        [sys.executable, "-m", "mq_cli", "enqueue", "-q", "bulk", "--lines", "--silent"],
        input=lines, capture_output=True, env=sqlite_db.env(), cwd=sqlite_db.tmp, timeout=60,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stderr == b""


def test_bash_completion_script():
    env = dict(os.environ, _MQ_COMPLETE="bash_source")
    result = subprocess.run(
        [sys.executable, "-c", "from mq_cli.cli import main; main()"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert "complete" in result.stdout and "_mq_completion" in result.stdout
