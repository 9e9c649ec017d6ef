"""Handlers the drain tests run (importable as ``tests.jobs:NAME``).

Each appends what it ran to the file named by $MQ_TEST_LOG, one JSON line per
run, so a test can check exactly which messages ran, how often, and in what order.
"""

from __future__ import annotations

import json
import os
import time

import mq_cli.runners.handlers as handlers


def _log(payload: object, **extra: object) -> None:
    line = json.dumps({"payload": payload, "pid": os.getpid(), **extra})
    with open(os.environ["MQ_TEST_LOG"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


def record(payload: object) -> None:
    _log(payload)


def record_meta(payload: object) -> None:
    info = handlers.current_message()
    _log(payload, id=info.id, queue=info.queue, error_count=info.error_count)


def fail_when_asked(payload: dict) -> object:
    _log(payload)
    if payload.get("fail"):
        raise ValueError(f"boom {payload.get('n')}")
    return None


def fail_first(payload: object) -> None:
    """Fails a message's first attempts (``{"fails": N}``, else 1), then succeeds;
    logs when each attempt started."""
    info = handlers.current_message()
    _log(payload, error_count=info.error_count, t=time.time())
    fails = payload.get("fails", 1) if isinstance(payload, dict) else 1
    if info.error_count < fails:
        raise ValueError(f"attempt {info.error_count + 1} fails")


def sleepy(payload: dict) -> None:
    time.sleep(float(payload.get("sleep", 0)))
    _log(payload)


def noop(payload: object) -> None:
    return None


class Counter:
    """Instantiated once per drain: counts the messages it saw."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, payload: object) -> None:
        self.seen += 1
        _log(payload, seen=self.seen)


def notify_record(messages: list) -> None:
    """An on_stalled/on_failed callback: logs the list it got, its queue, and the
    queue's counts in the database at that moment (to show it ran before any action)."""
    import mq_cli

    queue = handlers.current_message().queue
    with mq_cli.connect(database=os.environ["MQ_TEST_DATABASE_URL"]) as mq:
        counts = mq.stats(queue)[queue].to_json()
    _log(messages, queue=queue, counts=counts)


def notify_fail(messages: list) -> None:
    raise RuntimeError("the pager is down")


def notify_finish_first(messages: list) -> None:
    """A callback during which the first message finishes (deleted as its drain would)."""
    import mq_cli

    with mq_cli.connect(database=os.environ["MQ_TEST_DATABASE_URL"]) as mq:
        mq.delete([messages[0]["id"]], force=True)


def record_time(payload: object) -> None:
    """Logs when it started (time.time()), for wake-up latencies."""
    _log(payload, t=time.time())


def alive(payload: dict) -> None:
    """Logs "start", then a line every 0.1 s while it runs (so a test can tell when a
    run really stopped), then "end" after ``sleep`` seconds."""
    key = payload.get("k")
    _log(payload, event="start", at=time.time())
    end = time.monotonic() + float(payload.get("sleep", 0))
    while time.monotonic() < end:
        _log(payload, event="alive", at=time.time())
        time.sleep(0.1)
    _log(payload, event="end", at=time.time(), k=key)


def wait_for_file(payload: dict) -> None:
    """Logs "start", waits until the file ``until`` exists (at most 120 s: a test that
    forgot it must not hang the suite), then logs "end"."""
    _log(payload, event="start")
    end = time.monotonic() + 120
    while not os.path.exists(payload["until"]) and time.monotonic() < end:
        time.sleep(0.02)
    _log(payload, event="end")


def chatty(payload: dict) -> None:
    """Prints ``say`` with no newline at its end, then sleeps ``sleep`` seconds."""
    print(payload.get("say", ""), end="", flush=True)
    time.sleep(payload.get("sleep", 0))


def helper(payload: dict) -> None:
    """Starts a helper that leaves the handler's session (``setsid``-like: a tunnel,
    a cache) and lives 300 s, logs its pid, then runs ``sleep`` seconds. ``keep``:
    the helper is started as handlers.md says to keep one (MQ_FENCE cleared)."""
    import subprocess

    env = dict(os.environ)
    if payload.get("keep"):
        env.pop("MQ_FENCE", None)
    proc = subprocess.Popen(
        ["sleep", "300"], env=env, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _log(payload, event="helper", helper=proc.pid)
    time.sleep(float(payload.get("sleep", 0)))
    _log(payload, event="end")
