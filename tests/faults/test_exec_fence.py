"""An ``exec:`` handler, and everything it starts, dies with its drain's kill -9.

Once the drain is gone its handler's processes are orphans whose parent is
init, so only what the drain recorded at spawn can find them (the mark in
their environment: mq_cli/runners/fence.py). If one survived, gc would
requeue its message as stalled and another drain would run it while the
first run went on.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from mq_cli.drain.acks import GUARD_FIRED as STARVED
from tests.conftest import Db
from tests.faults.harness import wait_for

pytestmark = pytest.mark.slow

ROUNDS = 20

# Each records the pid of every process it starts in $PIDS, one per line, and
# says how many it starts in its name's entry of STARTS.
HANDLERS = {
    # a plain program: what `exec:sleep 30` is
    "plain": 'echo $$ >> "$PIDS"; exec sleep 60',
    # a shell with a child, a grandchild in a subshell, and a loop of short children
    "forks": (
        'echo $$ >> "$PIDS"; '
        '( echo $(sh -c "echo \\$PPID") >> "$PIDS"; sleep 60 & echo $! >> "$PIDS"; wait ) & '
        "while :; do sleep 0.2; done"
    ),
    # a child that leaves the handler's session, as a daemon would
    "setsid": (
        'echo $$ >> "$PIDS"; setsid sh -c \'echo $$ >> "$PIDS"; exec sleep 60\' & exec sleep 60'
    ),
    # a child that leaves the session and a grandchild that clears its environment
    # but stays in the child's session
    "setsid-env": (
        'echo $$ >> "$PIDS"; '
        'setsid sh -c \'echo $$ >> "$PIDS"; '
        'env -i sh -c "echo \\$\\$ >> $PIDS; exec sleep 60" & exec sleep 60\' & '
        "exec sleep 60"
    ),
}
STARTS = {"plain": 1, "forks": 3, "setsid": 2, "setsid-env": 3}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in (b"Z", b"X")


def _script(tmp_path: Path, kind: str) -> Path:
    script = tmp_path / f"{kind}.sh"
    script.write_text("#!/bin/sh\n" + HANDLERS[kind] + "\n")
    script.chmod(0o755)
    return script


def _config(tmp_path: Path, handlers: dict[str, Path], **options: str) -> Path:
    path = tmp_path / "mq.yaml"
    extra = "".join(f", {k}: {v}" for k, v in options.items())
    path.write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n"
        + "".join(
            f"  {kind.replace('-', '_')}: {{handler: {json.dumps(f'exec:{script}')}, "
            f"batch_size: 1{extra}}}\n"
            for kind, script in handlers.items()
        )
    )
    return path


def _pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split()]
    except (FileNotFoundError, ValueError):  # a line half written
        return []


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"])
def test_nothing_an_exec_handler_started_outlives_its_drains_kill_9(backend, request, tmp_path):
    db: Db = request.getfixturevalue(
        {"sqlite": "sqlite_db", "mysql": "fault_mysql", "postgres": "fault_pg"}[backend]
    )
    if backend == "sqlite":
        assert db.run("init").exit_code == 0
    scripts = {kind: _script(tmp_path, kind) for kind in HANDLERS}
    config = _config(tmp_path, scripts)
    survivors: list[str] = []
    for number in range(ROUNDS):
        kind = list(HANDLERS)[number % len(HANDLERS)]
        queue = kind.replace("-", "_")
        pids_file = tmp_path / f"pids.{number}"
        result = db.run("-c", str(config), "enqueue", "-q", queue, json.dumps({"n": number}))
        assert result.exit_code == 0, result.output
        drain = db.spawn(
            "-c", str(config), "drain", "-q", queue,
            env=db.env(PIDS=str(pids_file)), stdout=None, stderr=None,
        )  # fmt: skip
        try:
            started = STARTS[kind]
            wait_for(lambda f=pids_file, n=started: len(_pids(f)) >= n, timeout=60)
        finally:
            drain.send_signal(signal.SIGKILL)
            drain.wait()
        pids = _pids(pids_file)
        # Only a hang fails this: the guard acts within milliseconds of the drain's death.
        end = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < end:
            time.sleep(0.05)
        alive = [pid for pid in pids if _alive(pid)]
        if alive:
            survivors.append(f"round {number} ({kind}): {alive} still run")
            for pid in alive:
                os.kill(pid, signal.SIGKILL)
    assert survivors == []


def _runs(log: Path) -> list[tuple[str, float, float]]:
    """(run, first, last) time of each run in the handler's log."""
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        run, _, stamp = line.partition(" ")
        try:
            spans.setdefault(run, []).append(float(stamp))
        except ValueError:  # a line half written when its writer was killed
            continue
    return [(run, min(times), max(times)) for run, times in spans.items()]


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"])
def test_a_requeued_message_never_runs_while_its_killed_drains_exec_handler_still_ticks(
    backend, request, tmp_path
):
    """The issue's case: a second drain, waiting, takes the killed drain's message
    as soon as it is stalled; the first run must be over by then."""
    db: Db = request.getfixturevalue(
        {"sqlite": "sqlite_db", "mysql": "fault_mysql", "postgres": "fault_pg"}[backend]
    )
    if backend == "sqlite":
        assert db.run("init").exit_code == 0
    log = tmp_path / "ticks.log"
    script = tmp_path / "h.sh"
    # Ticks for 4 s from a child shell and its own loop, each tick stamped.
    script.write_text(
        "#!/bin/sh\n"
        "tick() { i=0; while [ $i -lt 20 ]; do "
        'echo "$$-$1 $(date +%s.%N)" >> "$LOG"; sleep 0.2; i=$((i+1)); done; }\n'
        "tick child &\n"
        "tick main\n"
        "wait\n"
    )
    script.chmod(0o755)
    config = tmp_path / "mq.yaml"
    config.write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n"
        f"  dbl: {{handler: {json.dumps(f'exec:{script}')}, requeue_stalled: true, "
        "concurrency: 2, batch_size: 1, stalled_after: 2s, retry_delay: 0}\n"
    )
    assert db.run("-c", str(config), "enqueue", "-q", "dbl", '{"n": 1}').exit_code == 0
    env = db.env(LOG=str(log))
    first = db.spawn("-c", str(config), "drain", "-q", "dbl", env=env, stdout=None, stderr=None)
    wait_for(lambda: log.exists() and log.read_text().count("\n") >= 4, timeout=60)
    second = db.spawn(
        "-c", str(config), "drain", "-q", "dbl", "--wait", "--max-seconds", "25", env=env
    )
    time.sleep(0.5)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = time.time()
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    runs = _runs(log)
    starts = sorted({run.split("-")[0] for run, _, _ in runs})
    # The first run and the one after. A second drain starved of the CPU past
    # stalled_after (2 s) ends its own run too and says so; the message then runs
    # once more: more runs, but never two at once (below).
    assert len(starts) == 2 or (len(starts) > 2 and STARVED in err.decode()), (
        runs, err.decode()
    )  # fmt: skip
    by_shell = {
        shell: (
            min(f for run, f, _ in runs if run.startswith(shell + "-")),
            max(last for run, _, last in runs if run.startswith(shell + "-")),
        )
        for shell in starts
    }
    spans = sorted(by_shell.values())
    for earlier, later in zip(spans, spans[1:], strict=False):
        assert earlier[1] < later[0], (
            f"a run ticked until {earlier[1]:.3f}, the next started at "
            f"{later[0]:.3f} (first drain killed at {killed_at:.3f})"
        )
    assert db.sql("SELECT COUNT(*) FROM mq_messages")[0][0] == 0
