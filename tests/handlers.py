"""Handlers the tests point mq at (``tests.handlers:NAME``); each shows one behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mq_cli.runners.handlers import current_message

NOT_CALLABLE = 42


def _append(path: str, record: object) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def ok(payload: object) -> None:
    return None


def returns_false(payload: object) -> bool:
    return False


def returns_zero(payload: object) -> int:
    return 0  # falsy but not False: a success


def raises(payload: object) -> None:
    raise ValueError(f"bad payload {payload!r}")


def sleeps(payload: dict) -> bool:
    time.sleep(payload["sleep"])
    return True


def record(payload: dict) -> None:
    """Appends the payload to the file it names."""
    _append(payload["file"], payload)


def record_type(payload: object) -> None:
    """Appends the payload's type and value to $MQ_TEST_OUT (any format)."""
    value = payload.decode("latin-1") if isinstance(payload, bytes) else payload
    _append(os.environ["MQ_TEST_OUT"], {"type": type(payload).__name__, "value": value})


def who_am_i(payload: dict) -> None:
    info = current_message()
    _append(
        payload["file"],
        {
            "id": info.id,
            "queue": info.queue,
            "error_count": info.error_count,
            "created_at": info.created_at.isoformat(),
            "pid": os.getpid(),
        },
    )


def exits(payload: object) -> None:
    os._exit(3)


def calls_sys_exit(payload: object) -> None:
    sys.exit(5)


def prints(payload: object) -> None:
    print("hello from a handler")
    print("and from its stderr", file=sys.stderr)


def prints_a_lot(payload: dict) -> None:
    """Prints payload["size"] bytes, then a last line."""
    sys.stdout.write("x" * payload["size"] + "\n")
    print("the last words")


def my_pid(payload: dict) -> None:
    _append(payload["file"], os.getpid())


class Counter:
    """Built once per runner: the count goes on across messages."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, payload: dict) -> None:
        self.calls += 1
        _append(payload["file"], self.calls)


class Methods:
    instances = 0

    def __init__(self) -> None:
        type(self).instances += 1
        self.calls = 0

    @staticmethod
    def static(payload: dict) -> None:
        _append(payload["file"], "static")

    @classmethod
    def klass(cls, payload: dict) -> None:
        _append(payload["file"], f"classmethod of {cls.__name__}")

    def instance(self, payload: dict) -> None:
        self.calls += 1
        _append(payload["file"], {"instances": type(self).instances, "calls": self.calls})


class NeedsArguments:
    def __init__(self, setting: str) -> None:
        self.setting = setting

    def __call__(self, payload: object) -> None:
        pass

    def method(self, payload: object) -> None:
        pass


class NotCallableInstances:
    pass


class BreaksOnBuild:
    def __init__(self) -> None:
        raise RuntimeError("no database configured")

    def __call__(self, payload: object) -> None:
        pass


def raises_long(payload: object) -> None:
    raise ValueError("x" * 100_000 + " THE END")


def spawns_sleeper(payload: dict) -> None:
    """Starts a `sleep` and waits for it: a timeout must kill the sleep too."""
    child = subprocess.Popen(["sleep", "60"])
    _append(payload["file"], child.pid)
    child.wait()


async def async_record(payload: dict) -> None:
    _append(payload["file"], "awaited")


def step(payload: dict) -> None:
    """Records its "n" and pid in its "file", then waits for its "until" file to exist (a
    test's release, 300 s at most: a hang's cap), sleeps, fails or exits as it says."""
    _append(payload["file"], {"n": payload["n"], "pid": os.getpid()})
    if payload.get("until"):
        deadline = time.monotonic() + 300
        while not os.path.exists(payload["until"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    if payload.get("exit") is not None:
        os._exit(payload["exit"])
    if payload.get("fail"):
        raise RuntimeError(payload["fail"] * payload.get("repeat", 1))


def forks_and_exits(payload: dict) -> None:
    """Leaves a child (holding every pipe the worker has) and exits the worker."""
    pid = os.fork()
    if pid == 0:
        time.sleep(payload.get("sleep", 60))
        os._exit(0)
    with open(payload["file"], "w") as out:
        out.write(str(pid))
    os._exit(7)


def fills_the_disk(payload: dict) -> None:
    """The drain's database file can grow no more (RLIMIT_FSIZE on the drain, our
    parent), as on a full disk: its acknowledgement of this message fails."""
    import resource

    size = os.path.getsize(payload["wal"])
    resource.prlimit(os.getppid(), resource.RLIMIT_FSIZE, (size, size))
