"""A drain stopped while its handler runs (SIGSTOP of its process group or of its
pid alone, Ctrl-Z at a terminal): the handler must not run on alone.

The stopped drain can neither heartbeat nor fence, so gc rightly requeues what
it held after stalled_after and another drain runs it. The first run must be
over by then: the handler stops within FENCE seconds of its drain's last sign
of life (mq_cli/runners/guard.py), and after SIGCONT the stopped drain records nothing
it no longer holds.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mq_cli.backends.liveness import FENCE
from tests.conftest import Db
from tests.faults import harness
from tests.faults.harness import GcLog, wait_for
from tests.faults.history import Disruption, check, read, runs_of
from tests.faults.jobs import TICK

pytestmark = pytest.mark.slow

STALLED_AFTER = 2.0
#: the second drain's: it holds its lease only while heartbeats land within
#: stalled_after's margin, and a loaded machine may delay one past what 2 s
#: allows (its own guard would then end m1, rightly); gc runs before it starts
SECOND_STALLED_AFTER = 60.0
#: a deadline that only a hang reaches
HANG = 60.0
PYTHON_HANDLER = "tests.faults.jobs:ticking"
EXEC_HANDLER = f"exec:{sys.executable} -m tests.faults.jobs ticking"


def _config(tmp_path: Path, name: str, handler: str, stalled_after: float) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"lock_dir: {tmp_path / ('locks-' + name)}\n"
        "queues:\n"
        f"  s: {{handler: {json.dumps(handler)}, batch_size: 2, "
        f"stalled_after: {stalled_after:g}s}}\n"
    )
    return path


class TerminalJob:
    """`mq drain` as the foreground job of an interactive bash on a pseudo-terminal,
    so that Ctrl-Z stops it the way job control does."""

    def __init__(self, env: dict[str, str], cwd: Path, args: list[str]):
        self.master, slave = pty.openpty()
        self.output = b""
        self.shell = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-i"],
            stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env={**env, "PS1": "$ "},
            start_new_session=True, preexec_fn=_take_terminal,
        )  # fmt: skip
        os.close(slave)
        command = " ".join([sys.executable, "-m", "mq_cli", *args])
        self.type(command + "\n")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def read(self, until: bytes, timeout: float) -> bytes:
        end = time.monotonic() + timeout
        while until not in self.output and time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:
                    break
        assert until in self.output, self.output.decode(errors="replace")[-2000:]
        return self.output

    def close(self) -> None:
        if self.shell.poll() is None:
            os.killpg(self.shell.pid, signal.SIGKILL)
        self.shell.wait()
        os.close(self.master)


def _take_terminal() -> None:
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _scenario(db: Db, tmp_path: Path, stop: str, handler: str = PYTHON_HANDLER) -> None:
    history = tmp_path / "history.jsonl"
    configs = {
        name: _config(tmp_path, name, handler, stalled_after)
        for name, stalled_after in (
            ("a", STALLED_AFTER),
            ("gc", STALLED_AFTER),
            ("b", SECOND_STALLED_AFTER),
        )
    }
    envs = {
        name: db.env(MQ_CONFIG=str(path), MQ_FAULT_HISTORY=str(history))
        for name, path in configs.items()
    }
    for key, sleep in (("m1", 6.0), ("m2", 0.5)):
        result = harness.mq(
            envs["a"], tmp_path, "enqueue", "-q", "s", json.dumps({"k": key, "sleep": sleep})
        )
        assert result.returncode == 0, result.stderr
    args = ["-v", "drain", "-q", "s"]
    terminal = None
    first = second = None
    try:
        if stop == "tty":
            terminal = TerminalJob(envs["a"], tmp_path, args)
        else:
            first = subprocess.Popen(
                [sys.executable, "-m", "mq_cli", *args], cwd=tmp_path, env=envs["a"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        started = wait_for(
            lambda: next((r for r in read(history) if r["event"] == "start"), None), 30, 0.02
        )
        assert started["msg"] == "m1"
        drain_a = int(started["drain"])
        time.sleep(0.5)
        if stop == "group":
            os.killpg(drain_a, signal.SIGSTOP)
        elif stop == "pid":
            os.kill(drain_a, signal.SIGSTOP)
        else:
            assert terminal is not None
            terminal.type("\x1a")  # Ctrl-Z
            terminal.read(b"Stopped", 10)
        stopped_at = time.time()

        log = GcLog()

        def requeued_both() -> bool:
            harness.gc_stalled_requeue(envs["gc"], tmp_path, log)
            return sum(log.requeued.values()) >= 2

        time.sleep(STALLED_AFTER)
        wait_for(requeued_both, 20, 0.2)
        assert log.failures == [], log.failures
        second = subprocess.Popen(
            [sys.executable, "-m", "mq_cli", *args], cwd=tmp_path, env=envs["b"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        wait_for(
            lambda: any(
                r["event"] == "start" and r["msg"] == "m1" and r["drain"] != drain_a
                for r in read(history)
            ),
            30,
            0.02,
        )
        time.sleep(0.5)
        if terminal is not None:
            # As its user would: `fg` continues the job (not a SIGCONT by pid, which
            # bash may not have seen yet when a `wait %1` that follows asks, on a
            # loaded machine: "job 1 is stopped"). 100 + the exit code: the typed
            # line's echo does not match what it prints.
            terminal.type("fg; echo rc=$((100 + $?))\n")
            out_a = terminal.read(b"rc=1", 60).decode(errors="replace")
            assert "rc=100" in out_a, out_a[-2000:]
        else:
            assert first is not None
            os.kill(drain_a, signal.SIGCONT)
            _, err = first.communicate(timeout=60)
            out_a = err.decode(errors="replace")
            assert first.returncode == 0, out_a
        _, err_b = second.communicate(timeout=60)
        assert second.returncode == 0, err_b.decode(errors="replace")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            if proc is not None:
                proc.communicate()  # closes its pipes, whether it ended or was killed
        if terminal is not None:
            terminal.close()

    events = read(history)
    runs = [r for r in runs_of(events) if r.msg == "m1"]
    assert [r.drain == drain_a for r in runs] == [True, False], runs
    first_run, second_run = runs
    assert first_run.outcome is None, "the stopped drain's handler ran on to its end"
    ticks = [
        json.loads(line)
        for line in Path(str(history) + ".ticks").read_text().splitlines()
        if f'"pid":{first_run.pid},' in line
    ]
    last_alive = max(t["t"] for t in ticks) + TICK
    overlap = last_alive - second_run.start
    print(
        f"FIGURES stopped drain ({db.kind}, {stop}): the handler ran on {last_alive - stopped_at:.2f} s "
        f"after the stop; overlap with the second run {max(overlap, 0.0):.2f} s"
    )
    # Never two runs at once, and the first stopped short of its 6 s (outcome None
    # above). How soon after the stop it ended (FENCE, 2 s, plus the signal's way)
    # is the FIGURES line's: bench/README.md, "Timings".
    assert overlap < 0, f"message m1 ran twice at once for {overlap:.2f} s"
    assert "no longer held" in out_a, out_a[-2000:]
    final = harness.final_state(db.sql)
    analysis = check(
        events,
        enqueued={"m1": "s", "m2": "s"},
        final=final,
        max_errors={"s": 10},
        disruptions=[Disruption(drain_a, stopped_at, "SIGSTOP")],
        requeued={"m1": 1, "m2": 1},
        batch_size=2,
    )
    assert analysis.violations == [], analysis.violations


@pytest.mark.parametrize("backend", ["sqlite", "mysql", "postgres"])
def test_a_stopped_process_group_does_not_leave_its_handler_running(backend, request, tmp_path):
    db = request.getfixturevalue(
        {"sqlite": "sqlite_db", "mysql": "fault_mysql", "postgres": "fault_pg"}[backend]
    )
    _scenario(db, tmp_path, "group")


def test_a_stopped_drain_pid_stops_its_handler_too(fault_pg, tmp_path):
    _scenario(fault_pg, tmp_path, "pid")


def test_ctrl_z_at_a_terminal_stops_the_handler_too(sqlite_db, tmp_path):
    _scenario(sqlite_db, tmp_path, "tty")


def test_an_exec_handler_stops_with_its_drain(fault_mysql, tmp_path):
    _scenario(fault_mysql, tmp_path, "group", EXEC_HANDLER)


def test_a_drain_stopped_past_fence_fails_its_handler_and_runs_it_again(sqlite_db, tmp_path):
    """Stopped longer than FENCE but not long enough for gc: the handler was ended,
    the drain records that as a failure when it wakes up, and a later drain runs it."""
    history = tmp_path / "history.jsonl"
    config = tmp_path / "mq.yaml"
    config.write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        f"queues:\n  s: {{handler: {PYTHON_HANDLER}, stalled_after: 1h, retry_delay: 0}}\n"
    )
    env = sqlite_db.env(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(history))
    # Far longer than the fence: what ends the first run is the guard's kill, however
    # late a loaded machine delivers it, not the handler's own end.
    payload = json.dumps({"k": "m1", "sleep": FENCE + 8})
    assert harness.mq(env, tmp_path, "enqueue", "-q", "s", payload).returncode == 0
    drain = subprocess.Popen(
        [sys.executable, "-m", "mq_cli", "drain", "-q", "s", "--max-messages", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: read(history), 30, 0.02)
        os.killpg(drain.pid, signal.SIGSTOP)
        # Stopped until the guard has killed the handler (FENCE after the drain's
        # last sign of life), however late: then the drain wakes up to find it ended.
        time.sleep(FENCE)
        ticks = Path(str(history) + ".ticks").read_text().splitlines()
        handler = json.loads(ticks[0])["pid"]
        wait_for(lambda: dead(handler), HANG, 0.05)
        os.killpg(drain.pid, signal.SIGCONT)
        _, err = drain.communicate(timeout=60)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.communicate()
    assert drain.returncode == 0, err
    assert [r["event"] for r in read(history)] == ["start"]
    shown = json.loads(harness.mq(env, tmp_path, "list", "-q", "s", "--json").stdout)
    assert [(m["status"], m["error_count"]) for m in shown] == [("ready", 1)]
    detail = json.loads(harness.mq(env, tmp_path, "show", str(shown[0]["id"]), "--json").stdout)
    assert "could not renew the handler's lease" in detail["last_error"]
    assert harness.mq(env, tmp_path, "drain", "-q", "s").returncode == 0
    assert [r["event"] for r in read(history)] == ["start", "start", "success"]
    assert sqlite_db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def dead(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (its parent, the stopped drain, cannot reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError):
        return True
