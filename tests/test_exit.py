"""How the `mq` process ends: its exit code and everything it printed, as a shell
and cron see them (a real subprocess; main() skips the interpreter's teardown)."""

from __future__ import annotations

import json
import pstats
import subprocess
import sys
from pathlib import Path


def mq(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mq_cli", "--config", str(tmp_path / "mq.yaml"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_the_process_exits_with_its_code_after_all_it_printed(tmp_path):
    (tmp_path / "mq.yaml").write_text(
        f"database:\n  url: sqlite:///{tmp_path}/mq.db\n"
        "queues:\n  jobs: {handler: 'tests.jobs:noop'}\n"
    )
    lines = "".join(f'{{"n": {i}}}\n' for i in range(500))
    enqueued = mq(tmp_path, "enqueue", "-q", "jobs", "--lines", stdin=lines)
    assert enqueued.returncode == 0, enqueued.stderr
    assert len(enqueued.stdout.split()) == 500  # a pipe: block-buffered, flushed at the end

    drained = mq(tmp_path, "drain", "-q", "jobs", "--json")
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["succeeded"] == 500

    unknown = mq(tmp_path, "drain", "-q", "nosuch")
    assert unknown.returncode == 2
    assert "nosuch" in unknown.stderr and "Traceback" not in unknown.stderr

    rejected = mq(tmp_path, "enqueue", "-q", "jobs", "not json")
    assert rejected.returncode == 1, rejected.stderr
    assert rejected.stdout == "" and "nothing was stored" in rejected.stderr


def test_a_database_that_cannot_be_reached_still_exits_3(tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "database:\n  url: mysql://root@127.0.0.1:1/nothing\n  connect_timeout: 2s\n"
        "queues:\n  jobs: {handler: 'tests.jobs:noop'}\n"
    )
    result = mq(tmp_path, "stats", "--json")
    assert result.returncode == 3
    assert result.stderr.startswith("mq: ") and "Traceback" not in result.stderr


def test_a_profiled_run_still_writes_its_profile(tmp_path):
    """python -m cProfile (what bench/README's profiles come from) writes its stats
    at Python's own exit, which the fast end must not skip."""
    (tmp_path / "mq.yaml").write_text(f"database:\n  url: sqlite:///{tmp_path}/mq.db\n")
    profile = tmp_path / "drain.prof"
    result = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "mq_cli",
         "--config", str(tmp_path / "mq.yaml"), "stats", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # the command's output, whole
    functions = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    assert any(name == "main" and "mq_cli" in path for path, _, name in functions)


def test_a_closed_stdout_loses_only_what_would_be_printed(tmp_path):
    """`mq enqueue ... >&-` (a crontab line that closes stdout): the message is
    stored and the command succeeds; the ids had nowhere to go."""
    (tmp_path / "mq.yaml").write_text(
        f"database:\n  url: sqlite:///{tmp_path}/mq.db\n"
        "queues:\n  jobs: {handler: 'tests.jobs:noop'}\n"
    )
    config = str(tmp_path / "mq.yaml")

    def closed_stdout(*args: str) -> None:
        closed = subprocess.run(
            ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "mq_cli", "--config",
             config, *args],
            capture_output=True, text=True, timeout=60,
            cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip
        assert closed.returncode == 0, closed.stderr
        assert "error" not in closed.stderr and "Traceback" not in closed.stderr

    def ready() -> int:
        return int(json.loads(mq(tmp_path, "stats", "--json").stdout)["jobs"]["ready"])

    closed_stdout("enqueue", "-q", "jobs", '{"n": 1}')
    assert ready() == 1
    closed_stdout("drain", "-q", "jobs", "--json")
    assert ready() == 0
