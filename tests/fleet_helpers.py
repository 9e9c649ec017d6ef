"""What the fleet-limit tests share: a config per simulated host (its own lock_dir),
drains as real processes, and overlaps read from the handlers' history."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Db
from tests.faults.history import read


def host_config(tmp: Path, url: str, host: int, queue: str, settings: dict) -> Path:
    """A config file of simulated host ``host``: the database, its own lock_dir, one queue."""
    path = tmp / f"host{host}.yaml"
    config = {
        "database": url,
        "lock_dir": str(tmp / f"locks{host}"),
        "queues": {queue: settings},
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def enqueue(
    db: Db, queue: str, count: int, sleep: float, prefix: str = "m", **extra: object
) -> None:
    lines = "".join(
        json.dumps({"k": f"{prefix}{i}", "sleep": sleep, **extra}) + "\n" for i in range(count)
    )
    result = db.run("enqueue", "-q", queue, "--lines", input=lines)
    assert result.exit_code == 0, result.output


def spawn_drain(db: Db, config: Path, history: Path, *args: str) -> subprocess.Popen:
    env = db.env(MQ_FAULT_HISTORY=str(history))
    del env["MQ_DATABASE_URL"]  # the host's config names the database (a Galera node)
    return subprocess.Popen(
        [sys.executable, "-m", "mq_cli", "-c", str(config), "drain", *args, "--json"],
        cwd=db.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def finish(procs: list[subprocess.Popen], timeout: float = 120) -> list[dict]:
    """Wait for every drain; their JSON reports (each must exit 0)."""
    reports = []
    end = time.monotonic() + timeout
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(end - time.monotonic(), 1))
            assert proc.returncode == 0, err.decode()
            reports.append(json.loads(out))
    finally:  # a failure here must not leave drains (and their pipes) to the next test
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return reports


def stop_when_done(procs: list[subprocess.Popen], history: Path, count: int) -> None:
    """SIGTERM ``--wait`` drains once ``count`` runs succeeded (a hang's deadline: 120 s):
    a test then waits for the work, not for a --max-seconds guessed for the machine."""
    deadline = time.monotonic() + 120
    while sum(r["event"] == "success" for r in read(history)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} runs succeeded in 120 s"
        assert all(p.poll() in (None, 0) for p in procs), "a drain failed"
        time.sleep(0.05)
    # A drain still starting Python has no handler yet, and SIGTERM would kill it
    # (a --processes parent blocks it in its children for that reason): wait for each
    # live one to catch it.
    while not all(proc.poll() is not None or _catches_sigterm(proc.pid) for proc in procs):
        assert time.monotonic() < deadline, "a drain never installed its SIGTERM handler"
        time.sleep(0.05)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone meanwhile
        return True
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def intervals(history: Path) -> list[tuple[float, float]]:
    """(start, end) of each handler run that ended."""
    starts: dict[str, float] = {}
    found = []
    for record in read(history):
        if record["event"] == "start":
            starts[record["msg"]] = record["t"]
        elif record["msg"] in starts:
            found.append((starts.pop(record["msg"]), record["t"]))
    return found


def most_at_once(runs: list[tuple[float, float]]) -> int:
    """The largest number of runs in progress at one moment."""
    edges = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def over_the_bucket(times: list[float], since: float, burst: float, rate: float) -> list[int]:
    """The starts (1-based) that came sooner than the bucket allows.

    By any moment, at most a full bucket plus ``rate`` a second since the first
    grant can have been granted, and that grant came after ``since`` (the drains'
    spawn); a handler starts after its token, so the starts by then are no more
    (+1 at the edge). Judged against start times, not as a sliding window: a
    runner child's start-up delays the first handlers, which then start together
    with later grants, so a window of starts can hold more than a window of grants.
    """
    return [n for n, t in enumerate(times, 1) if n > burst + rate * (t - since) + 1]
