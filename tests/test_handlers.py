"""Handlers for real: every path form, formats, failures, timeouts, ticks, exec programs.

The runners start real processes (the Python worker, exec programs); nothing
is mocked. Handlers live in tests/handlers.py.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

import pytest

from mq_cli.core.errors import HandlerNotFound
from mq_cli.core.payloads import decode
from mq_cli.runners import child, make_runner
from mq_cli.runners.handlers import (
    ERROR_LIMIT,
    MessageInfo,
    Outcome,
    current_message,
)
from mq_cli.runners.paths import load, resolve
from tests.conftest import REPO

CREATED = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
INFO = MessageInfo(id=1, queue="q", error_count=0, created_at=CREATED)
PY = shlex.quote(sys.executable)
#: a bound only a hang reaches: far below what each test's handler would take if
#: nothing stopped it (30 or 60 s), far above what a loaded machine adds
HANG = 15.0


def nothing() -> None:
    pass


@pytest.fixture
def make():
    """make(path, fmt) -> a started runner, closed after the test."""
    made = []

    def _make(path: str, fmt: str = "json", start: bool = True):
        runner = make_runner(path, fmt)
        made.append(runner)
        if start:
            runner.start()
        return runner

    yield _make
    for runner in made:
        runner.close()


def run(runner, payload: object = None, *, timeout=10.0, tick=nothing, every=1.0, info=INFO):
    if not isinstance(payload, bytes):
        payload = json.dumps(payload if payload is not None else {}).encode()
    return runner.run(payload, info, timeout, tick, every)


def lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting to be reaped counts as dead).

    Every thread counts: a killed process can be reaped only once all its
    threads are gone, though its main thread already shows as a zombie.
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except FileNotFoundError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return True
    return False


def wait_dead(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


# --- Python handlers: forms ---------------------------------------------------------


def test_function_success_and_false(make):
    assert run(make("tests.handlers:ok")) == Outcome(ok=True)
    assert run(make("tests.handlers:returns_zero")) == Outcome(ok=True)
    assert run(make("tests.handlers:returns_false")) == Outcome(
        ok=False, error="handler returned False"
    )


def test_exception_gives_traceback_ending_with_the_error(make):
    runner = make("tests.handlers:raises")
    outcome = run(runner, {"a": 1})
    assert not outcome.ok and not outcome.timed_out
    assert outcome.error.splitlines()[-1] == "ValueError: bad payload {'a': 1}"
    assert "tests/handlers.py" in outcome.error
    assert "mq_cli/runners/" not in outcome.error  # mq's own frames (child.py) are left out
    pid = runner.pid
    assert run(runner, {"a": 2}).error.endswith("{'a': 2}")
    assert runner.pid == pid  # an exception does not cost a new process


def test_long_error_keeps_its_end(make):
    outcome = run(make("tests.handlers:raises_long"))
    assert len(outcome.error) <= ERROR_LIMIT
    assert outcome.error.endswith("x THE END")


def test_sys_exit_fails_the_message_not_the_worker(make):
    runner = make("tests.handlers:calls_sys_exit")
    pid = runner.pid
    outcome = run(runner)
    assert not outcome.ok and "SystemExit: 5" in outcome.error
    assert runner.pid == pid


def test_class_is_instantiated_once(make, tmp_path):
    runner = make("tests.handlers:Counter")
    out = tmp_path / "calls"
    for _ in range(3):
        assert run(runner, {"file": str(out)}).ok
    assert lines(out) == [1, 2, 3]


@pytest.mark.parametrize(
    "method, expected",
    [
        ("static", ["static", "static"]),
        ("klass", ["classmethod of Methods", "classmethod of Methods"]),
        ("instance", [{"instances": 1, "calls": 1}, {"instances": 1, "calls": 2}]),
    ],
)
def test_methods(make, tmp_path, method, expected):
    runner = make(f"tests.handlers:Methods.{method}")
    out = tmp_path / "calls"
    assert run(runner, {"file": str(out)}).ok
    assert run(runner, {"file": str(out)}).ok
    assert lines(out) == expected


def test_current_message(make, tmp_path):
    out = tmp_path / "info"
    info = MessageInfo(id=42, queue="thumbs", error_count=3, created_at=CREATED)
    assert run(make("tests.handlers:who_am_i"), {"file": str(out)}, info=info).ok
    record = lines(out)[0]
    del record["pid"]
    assert record == {
        "id": 42,
        "queue": "thumbs",
        "error_count": 3,
        "created_at": "2024-05-06T07:08:09+00:00",
    }
    with pytest.raises(RuntimeError, match="only inside a handler"):
        current_message()


def test_message_info_is_read_only_and_compared_by_value():
    # What current_message() returns: a handler may keep it, compare it, use it as a key.
    info = MessageInfo(id=42, queue="thumbs", error_count=3, created_at=CREATED)
    with pytest.raises(AttributeError, match="read-only"):
        info.error_count = 0  # type: ignore[misc]
    twin = MessageInfo(42, "thumbs", 3, CREATED)
    assert info == twin and hash(info) == hash(twin)
    assert info != MessageInfo(43, "thumbs", 3, CREATED)
    assert {info: 1}[twin] == 1
    assert repr(info) == (
        "MessageInfo(id=42, queue='thumbs', error_count=3, created_at="
        "datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc))"
    )
    # A handler may hand it to another process (multiprocessing, a queue of its own).
    import copy
    import pickle  # noqa: S403

    assert pickle.loads(pickle.dumps(info)) == info
    assert copy.copy(info) == info
    # An outcome's run time is not part of what it says.
    assert Outcome(ok=True, seconds=0.5) == Outcome(ok=True, seconds=1.5)
    assert Outcome(ok=False, error="x") != Outcome(ok=False, error="y")


def test_the_handlers_child_and_guard_start_without_heavy_imports():
    # Both start with every drain that runs a handler, before its first message:
    # typing, dataclasses and inspect cost the child ~15 ms; subprocess and secrets
    # (the drain's side of guard.py and fence.py) the guard ~7 ms. Neither needs them.
    heavy = "{'typing', 'dataclasses', 'inspect', 'shutil', 'traceback', 'subprocess', 'secrets'}"
    report = f"print(' '.join(sorted({heavy} & set(sys.modules))))"
    child = (
        f"import sys; sys.path.insert(0, {REPO!r}); from mq_cli.runners.child import main; "
        f"from mq_cli.runners.paths import load; load('tests.jobs:noop'); {report}"
    )
    # The guard runs as a script (python -I -S guard.py): its module and fence.py only.
    guard = f"import sys; sys.path.append({REPO + '/mq_cli/runners'!r}); import guard; {report}"
    for flags, code in ((["-I"], child), (["-I", "-S"], guard)):
        out = subprocess.run(
            [sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert (out.returncode, out.stderr, out.stdout.strip()) == (0, "", ""), code


def test_module_in_the_working_directory(make, tmp_path):
    # cron starts `mq` somewhere; modules next to it must import, in the parent and the worker.
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "def handle(payload):\n    open(payload['file'], 'w').write('done')\n"
    )
    resolve(f"{name}:handle")
    out = tmp_path / "out"
    assert run(make(f"{name}:handle"), {"file": str(out)}).ok
    assert out.read_text() == "done"


def test_handler_output_reaches_our_stderr_not_our_stdout(make, capfd):
    # Our stdout belongs to `mq drain --json`; a handler's prints are a log.
    runner = make("tests.handlers:prints")
    assert run(runner).ok
    assert run(runner).ok  # the protocol survived the prints
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err.count("hello from a handler") == 2
    assert captured.err.count("and from its stderr") == 2


def test_a_handler_printing_megabytes_passes_on_only_its_end(make, capfd):
    runner = make("tests.handlers:prints_a_lot")
    assert run(runner, {"size": 5_000_000}).ok
    assert run(runner, {"size": 10}).ok
    captured = capfd.readouterr()
    assert captured.out == ""
    assert len(captured.err) < 40_000
    assert captured.err.count("the last words") == 2
    assert "earlier bytes left out" in captured.err


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
@pytest.mark.parametrize("timeout", [0, 30.0])
def test_a_handler_that_forks_and_exits_is_a_death_not_a_timeout(
    make, tmp_path, monkeypatch, timeout, pidfd
):
    if not pidfd:  # Linux before 5.3: the runner looks at the pid now and then
        monkeypatch.setattr("mq_cli.runners.worker._pidfd", lambda pid: -1)
    # Its child inherits the worker's end of our pipe, so no EOF comes while it
    # lives (15 s): the death must be seen from the worker's pid.
    runner = make("tests.handlers:forks_and_exits")
    pid_file = tmp_path / "forked"
    started = time.monotonic()
    outcome = run(runner, {"file": str(pid_file), "sleep": 60}, timeout=timeout or None)
    assert time.monotonic() - started < HANG  # not when its child ends (60 s)
    assert not outcome.ok and not outcome.timed_out
    assert outcome.error == "handler process died: exit code 7"
    assert wait_dead(int(pid_file.read_text()))  # what it started died with it
    assert run(make("tests.handlers:ok")).ok


def test_async_handler_is_awaited(make, tmp_path):
    out = tmp_path / "calls"
    assert run(make("tests.handlers:async_record"), {"file": str(out)}).ok
    assert lines(out) == ["awaited"]


def test_drain_with_closed_stdout_keeps_the_protocol_clean(tmp_path):
    # New pipes would get fd 1; the handler's prints must not reach them.
    script = textwrap.dedent(
        """
        import datetime, os, sys
        from mq_cli.runners.handlers import MessageInfo
        from mq_cli.runners import make_runner
        info = MessageInfo(1, "q", 0, datetime.datetime.now(datetime.timezone.utc))
        runner = make_runner("tests.handlers:prints", "json")
        runner.start()
        outcomes = [runner.run(b"{}", info, 10, lambda: None, 1) for _ in range(3)]
        runner.close()
        os.write(2, repr(outcomes).encode())
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run(
        [sys.executable, "-c", f"import os; os.close(1); exec({script!r})"],
        stderr=subprocess.PIPE,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().count("Outcome(ok=True") == 3, result.stderr.decode()


# --- formats -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, payload, expected",
    [
        ("json", b'{"a": [1, 2]}', {"type": "dict", "value": {"a": [1, 2]}}),
        ("json", b'"just a string"', {"type": "str", "value": "just a string"}),
        ("text", "héllo\n".encode(), {"type": "str", "value": "héllo\n"}),
        ("bytes", b"\x00\xff raw", {"type": "bytes", "value": "\x00\xff raw"}),
    ],
)
def test_payload_decoded_per_format(make, tmp_path, monkeypatch, fmt, payload, expected):
    monkeypatch.setenv("MQ_TEST_OUT", str(tmp_path / "out"))
    assert run(make("tests.handlers:record_type", fmt), payload).ok
    assert lines(tmp_path / "out") == [expected]


@pytest.mark.parametrize(
    "fmt, payload, message",
    [("json", b"{not json", "payload is not valid json"), ("text", b"\xff\xfe", "not valid text")],
)
def test_undecodable_payload_fails_clearly(make, tmp_path, monkeypatch, fmt, payload, message):
    monkeypatch.setenv("MQ_TEST_OUT", str(tmp_path / "out"))
    runner = make("tests.handlers:record_type", fmt)
    outcome = run(runner, payload)
    assert not outcome.ok and message in outcome.error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1}',
        b"\xef\xbb\xbf[1]",  # UTF-8 with a BOM
        '["é"]'.encode("utf-16"),
        '["é"]'.encode("utf-16-le"),
        '{"a": "é"}'.encode("utf-32-be"),
        b"7",
        b" ",
        b"",
        b'"\xed\xa0\x80"',  # a lone surrogate: json.loads takes it (surrogatepass)
        b'["\xff"]',
        b"[1] x",
    ],
)
def test_a_json_payload_decodes_as_json_loads_does(data):
    # decode() skips json.loads' search for the encoding when it can only be UTF-8.
    try:
        expected: object = json.loads(data)
    except ValueError as exc:
        expected = type(exc)
    try:
        got: object = decode(data, "json")
    except ValueError as exc:
        got = type(exc)
    assert got == expected


def test_a_reply_is_taken_as_read_only_when_it_is_the_one_expected():
    # The drain takes the usual reply straight from its buffer (FrameBuffer.next_reply);
    # anything else goes the frame's way, which names what is wrong.
    buffer = child.FrameBuffer()
    buffer.feed(child.encode_reply(3, child.DONE, 1.5, 0.25))
    buffer.feed(child.encode_reply(4, child.FAILED, 2.5, 0.5, "boom"))
    buffer.feed(child.encode_reply(7, child.DONE, 3.5, 0.75))
    assert buffer.next_reply(3) == (child.DONE, 1.5, 0.25, "")
    assert buffer.next_reply(4) is None  # an error text: the frame's way
    assert child.decode_reply(buffer.next_frame(), 4) == (child.FAILED, 2.5, 0.5, "boom")
    assert buffer.next_reply(5) is None and buffer.has_frame()  # left as it was
    assert child.decode_reply(buffer.next_frame(), 5) == "reply to message 7 when 5 was running"
    assert buffer.next_reply(8) is None and not buffer.has_frame()


# --- timeouts, ticks, deaths, signals -----------------------------------------------


def test_timeout_kills_the_worker_and_the_next_message_gets_a_fresh_one(make):
    runner = make("tests.handlers:sleeps")
    first = runner.pid
    started = time.monotonic()
    outcome = run(runner, {"sleep": 30}, timeout=1)
    assert time.monotonic() - started < HANG  # the timeout, not the handler's 30 s
    assert outcome == Outcome(ok=False, error="timed out after 1s", timed_out=True)
    assert wait_dead(first)
    assert run(runner, {"sleep": 0}, timeout=5).ok
    assert runner.pid != first


def test_timeout_kills_what_the_handler_started(make, tmp_path):
    out = tmp_path / "pids"
    outcome = run(make("tests.handlers:spawns_sleeper"), {"file": str(out)}, timeout=1)
    assert outcome.timed_out
    assert wait_dead(lines(out)[0])


def test_no_timeout_means_no_limit(make):
    assert run(make("tests.handlers:sleeps"), {"sleep": 0.3}, timeout=None).ok
    assert run(make("tests.handlers:sleeps"), {"sleep": 0.3}, timeout=0).ok


def test_tick_is_called_while_a_slow_handler_runs(make):
    ticks: list[float] = []
    started = time.monotonic()
    outcome = run(
        make("tests.handlers:sleeps"),
        {"sleep": 1.0},
        tick=lambda: ticks.append(time.monotonic()),
        every=0.1,
    )
    assert outcome.ok
    # Ticks come while it runs, not once at its end: no gap as long as the handler.
    # (Their regularity is the machine's: ten or so a second when it is quiet.)
    assert len(ticks) >= 2
    gaps = [b - a for a, b in pairwise([started, *ticks])]
    assert max(gaps) < 1.0, gaps


def test_an_exception_from_tick_propagates_and_leaves_the_runner_usable(make):
    runner = make("tests.handlers:sleeps")

    def broken_tick() -> None:
        raise ConnectionError("database gone")

    with pytest.raises(ConnectionError):
        run(runner, {"sleep": 5}, tick=broken_tick, every=0.05)
    assert run(runner, {"sleep": 0}).ok


def test_worker_exit_is_a_failure_and_the_next_message_gets_a_fresh_worker(make):
    runner = make("tests.handlers:exits")
    assert run(runner) == Outcome(ok=False, error="handler process died: exit code 3")
    assert runner.pid is None  # reaped, nothing left behind
    # the second message ran at all: in a fresh worker
    assert run(runner) == Outcome(ok=False, error="handler process died: exit code 3")


def test_worker_killed_by_a_signal_is_a_failure(make):
    runner = make("tests.handlers:sleeps")
    first = runner.pid

    def murder() -> None:
        os.kill(first, signal.SIGKILL)

    outcome = run(runner, {"sleep": 10}, tick=murder, every=0.1)
    assert outcome == Outcome(ok=False, error="handler process died: signal 9 (SIGKILL)")
    assert run(runner, {"sleep": 0}).ok
    assert runner.pid != first


def test_worker_died_between_messages_is_replaced_silently(make):
    runner = make("tests.handlers:ok")
    os.kill(runner.pid, signal.SIGKILL)
    wait_dead(runner.pid)
    assert run(runner).ok


def test_worker_ignores_sigint_and_sigterm(make):
    runner = make("tests.handlers:sleeps")
    sent = []

    def signal_it() -> None:
        if not sent:
            os.kill(runner.pid, signal.SIGTERM)
            os.kill(runner.pid, signal.SIGINT)
            sent.append(True)

    assert run(runner, {"sleep": 0.5}, tick=signal_it, every=0.1) == Outcome(ok=True)
    assert sent


def test_kill_stops_the_running_handler(make):
    runner = make("tests.handlers:sleeps")
    started = time.monotonic()
    outcome = run(runner, {"sleep": 30}, tick=runner.kill, every=0.1)
    assert outcome == Outcome(ok=False, error="killed: the drain was stopped")
    assert time.monotonic() - started < HANG  # killed, not waited for (30 s)
    assert run(runner, {"sleep": 0}).ok


def test_worker_exits_when_the_drain_is_killed(tmp_path):
    script = textwrap.dedent(
        """
        import time
        from mq_cli.runners import make_runner
        runner = make_runner("tests.handlers:ok", "json")
        runner.start()
        print(runner.pid, flush=True)
        time.sleep(60)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    drain = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        worker = int(drain.stdout.readline())
        assert alive(worker)
        drain.kill()
        drain.wait()
        assert wait_dead(worker), "the worker outlived its drain"
    finally:
        drain.kill()
        drain.wait()
        drain.stdout.close()


def test_drain_killed_mid_handler_takes_the_handler_with_it(tmp_path):
    # Otherwise the handler would go on with a message that may be requeued
    # as stalled and run again elsewhere at the same time.
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import datetime
        from mq_cli.runners.handlers import MessageInfo
        from mq_cli.runners import make_runner
        runner = make_runner("tests.handlers:spawns_sleeper", "json")
        runner.start()
        print(runner.pid, flush=True)
        info = MessageInfo(1, "q", 0, datetime.datetime.now(datetime.timezone.utc))
        runner.run(b'{{"file": "{pids}"}}', info, None, lambda: None, 1)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    drain = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        worker = int(drain.stdout.readline())
        deadline = time.monotonic() + 120  # a hang's deadline
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        sleeper = lines(pids)[0]
        drain.kill()
        drain.wait()
        assert wait_dead(worker), "the handler outlived its drain"
        assert wait_dead(sleeper), "what the handler started outlived its drain"
    finally:
        drain.kill()
        drain.wait()
        drain.stdout.close()


def test_close_is_idempotent_and_reaps(make):
    runner = make("tests.handlers:ok")
    pid = runner.pid
    runner.close()
    runner.close()
    assert runner.pid is None
    assert not alive(pid)


# --- handler paths that cannot work --------------------------------------------------


BAD_PATHS = [
    ("tests.no_such_module:handle", "no module named 'tests.no_such_module'"),
    ("no_such_package.jobs:handle", "no module named 'no_such_package'"),
    ("tests.handlers:nope", "has no attribute 'nope'"),
    ("tests.handlers:Methods.nope", "has no attribute 'nope'"),
    ("tests.handlers:NOT_CALLABLE", "not something callable"),
    ("tests.handlers:NeedsArguments", "cannot be built with no arguments"),
    ("tests.handlers:NeedsArguments.method", "cannot be built with no arguments"),
    ("tests.handlers:NotCallableInstances", "not callable"),
    ("foo", "not a handler path"),
    ("tests.handlers:", "not a handler path"),
    ("tests handlers:ok", "not a handler path"),
    ("exec:", "names no command"),
    ("exec:'unbalanced", "cannot split"),
    ("exec:no-such-program-mq-test --flag", "not found on PATH"),
    ("exec:/no/such/program", "does not exist or is not executable"),
]


@pytest.mark.parametrize("path, message", BAD_PATHS)
def test_resolve_rejects_with_a_short_clear_message(path, message):
    with pytest.raises(HandlerNotFound, match=None) as caught:
        resolve(path)
    text = str(caught.value)
    assert message in text
    assert repr(path) in text
    assert text.count("\n") <= 1


@pytest.mark.parametrize("path, message", BAD_PATHS)
def test_start_rejects_too(make, path, message):
    with pytest.raises(HandlerNotFound) as caught:
        make(path)
    if "not callable" not in message:  # the worker says it from its side
        assert message in str(caught.value)


def test_module_with_a_syntax_error(make, tmp_path):
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def handle(payload):\n    return (\n")
    for attempt in (lambda: resolve(f"{name}:handle"), lambda: make(f"{name}:handle")):
        with pytest.raises(HandlerNotFound, match="SyntaxError"):
            attempt()


def test_module_whose_own_import_is_missing(tmp_path):
    name = f"needs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import not_installed_anywhere\n")
    with pytest.raises(HandlerNotFound, match="install what it imports"):
        resolve(f"{name}:handle")


def test_constructor_is_not_run_by_resolve_but_fails_start(make):
    resolve("tests.handlers:BreaksOnBuild")
    with pytest.raises(HandlerNotFound, match="no database configured"):
        make("tests.handlers:BreaksOnBuild")


def test_non_executable_file(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(HandlerNotFound, match="not executable"):
        resolve(f"exec:{script}")


@pytest.mark.parametrize(
    "path",
    [
        "tests.handlers:ok",
        "tests.handlers:Counter",
        "tests.handlers:Methods.static",
        "tests.handlers:Methods.klass",
        "tests.handlers:Methods.instance",
        "exec:true",
        "exec:/bin/sh -c 'exit 0'",
    ],
)
def test_resolve_accepts(path):
    resolve(path)


def test_load_returns_a_callable():
    assert load("tests.handlers:returns_false")(None) is False
    assert load("tests.handlers:Methods.instance").__self__.__class__.__name__ == "Methods"


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown format"):
        make_runner("tests.handlers:ok", "yaml")


# --- exec handlers -------------------------------------------------------------------


def test_exec_gets_the_raw_payload_on_stdin(make, tmp_path):
    out = tmp_path / "out"
    payload = b"\x00\xff binary \n$(touch nothing)"
    assert run(make(f"exec:tee {out}", "bytes"), payload) == Outcome(ok=True)
    assert out.read_bytes() == payload


def test_exec_failure_reports_status_and_stderr_tail(make):
    script = "echo to stdout; echo first >&2; echo it broke >&2; exit 3"
    outcome = run(make(f"exec:sh -c {shlex.quote(script)}"), b"")
    assert outcome == Outcome(ok=False, error="exit status 3: first\nit broke")


def test_exec_failure_falls_back_to_stdout(make):
    outcome = run(make("exec:sh -c 'echo only stdout; exit 4'"), b"")
    assert outcome.error == "exit status 4: only stdout"
    assert run(make("exec:false"), b"").error == "exit status 1"


def test_exec_killed_by_a_signal(make):
    outcome = run(make("exec:sh -c 'kill -9 $$'"), b"")
    assert outcome.error == "killed by signal 9 (SIGKILL)"


def test_exec_timeout_kills_the_process_group(make, tmp_path):
    pidfile = tmp_path / "pid"
    script = f"sleep 60 & echo $! > {pidfile}; echo waiting >&2; wait"
    runner = make(f"exec:sh -c {shlex.quote(script)}")
    started = time.monotonic()
    outcome = run(runner, b"", timeout=1)
    assert time.monotonic() - started < HANG  # the timeout, not the sleep's 60 s
    assert outcome == Outcome(ok=False, error="timed out after 1s: waiting", timed_out=True)
    assert wait_dead(int(pidfile.read_text()))


def test_exec_sleep_timeout(make):
    outcome = run(make("exec:sleep 30"), b"", timeout=0.5)
    assert outcome.timed_out and outcome.error == "timed out after 0.5s"


def test_exec_environment(make, tmp_path):
    out = tmp_path / "env"
    info = MessageInfo(id=7, queue="mail", error_count=2, created_at=CREATED)
    runner = make(f"exec:sh -c 'env > \"$0\"' {out}")
    assert run(runner, b"", info=info).ok
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["MQ_MESSAGE_ID"] == "7"
    assert env["MQ_QUEUE"] == "mail"
    assert env["MQ_ERROR_COUNT"] == "2"
    assert env["MQ_CREATED_AT"] == "2024-05-06T07:08:09Z"


def test_exec_ticks_while_waiting(make):
    ticks = []
    assert run(make("exec:sleep 0.6"), b"", tick=lambda: ticks.append(1), every=0.1).ok
    assert len(ticks) >= 4


def test_exec_kill(make):
    runner = make("exec:sleep 30")
    outcome = run(runner, b"", tick=runner.kill, every=0.1)
    assert outcome == Outcome(ok=False, error="killed: the drain was stopped")


@pytest.mark.parametrize("stream", ["stderr", "stdout"])
def test_exec_huge_output_costs_no_memory(make, stream):
    code = (
        f"import sys; out = sys.{stream}.buffer; chunk = b'x' * 1000000\n"
        "for _ in range(50): out.write(chunk)\n"
        "out.write(b' THE END'); sys.exit(1)"
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = run(make(f"exec:{PY} -c {shlex.quote(code)}"), b"", timeout=60)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert not outcome.ok
    assert outcome.error.startswith("exit status 1: ")
    assert outcome.error.endswith("x THE END")
    assert len(outcome.error) <= ERROR_LIMIT
    assert grown_mb < 20


def test_exec_big_payload_read_or_ignored(make, tmp_path):
    payload = b"y" * (5 * 1024 * 1024)
    out = tmp_path / "count"
    assert run(make(f"exec:sh -c 'wc -c > \"$0\"' {out}"), payload).ok
    assert out.read_text().strip() == str(len(payload))
    # a program that never reads stdin must not hang us on a full pipe
    assert run(make("exec:true"), payload, timeout=10).ok


def test_exec_never_uses_a_shell(make, tmp_path):
    marker = tmp_path / "marker"
    out = tmp_path / "out"
    runner = make(f"exec:printf '%s|' $(touch {marker}) ; touch {marker} > {out}")
    assert run(runner, f"$(touch {marker}); touch {marker}".encode()).ok
    assert not marker.exists() and not out.exists()
    tee = make(f"exec:tee {out}")
    assert run(tee, f"`touch {marker}` $(touch {marker})".encode()).ok
    assert not marker.exists()


def test_exec_program_gone_after_start(make, tmp_path):
    program = tmp_path / "prog"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    runner = make(f"exec:{program}")
    program.unlink()
    outcome = run(runner, b"")
    assert not outcome.ok and "cannot run" in outcome.error


# --- cost per message (printed with -s; no timed assertion) ------------------------


def test_per_message_overhead(make):
    count = 2000
    runner = make("tests.handlers:ok")
    handler = load("tests.handlers:ok")
    payload = b'{"n": 1}'
    run(runner, payload)
    started = time.perf_counter()
    for _ in range(count):
        runner.run(payload, INFO, 600, nothing, 5)
    worker = (time.perf_counter() - started) / count
    started = time.perf_counter()
    for _ in range(count):
        handler(json.loads(payload))
    inline = (time.perf_counter() - started) / count
    print(f"\nper message: worker {worker * 1e6:.0f} us, inline {inline * 1e6:.1f} us")
