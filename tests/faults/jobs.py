"""Handlers of the fault suite, importable as ``tests.faults.jobs:NAME``.

Every run is recorded in the history file named by $MQ_FAULT_HISTORY (see
tests/faults/history.py); a message's identity is its payload's ``k``.

Run as a program (``python -m tests.faults.jobs capture``) it is an ``exec:``
handler that appends its argv and its stdin (base64) to $MQ_FAULT_HISTORY.
"""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import sys
import time

from mq_cli.runners.handlers import current_message
from tests.faults.history import event, read, record


def _history() -> str:
    return os.environ["MQ_FAULT_HISTORY"]


def chaos(payload: dict) -> None:
    """Sleeps up to ``sleep`` seconds; fails with probability ``fail``.

    With ``cut`` set, it asks the test's cutter (UDP, $MQ_FAULT_CUT_PORT) to
    drop every database connection after it succeeded and before it returns,
    so the drain's acknowledgement meets a dead connection.
    """
    key = payload["k"]
    path = _history()
    event(path, key, "start")
    time.sleep(random.uniform(0, float(payload.get("sleep", 0))))
    if random.random() < float(payload.get("fail", 0)):
        event(path, key, "fail")
        raise RuntimeError(f"chaos: {key} fails on purpose")
    event(path, key, "success")
    if payload.get("cut"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(key.encode(), ("127.0.0.1", int(os.environ["MQ_FAULT_CUT_PORT"])))
        time.sleep(0.05)  # the cutter acts now, before the drain acknowledges


def poison(payload: dict) -> None:
    """Always fails: its messages must end `failed` after max_errors failures."""
    key = payload["k"]
    event(_history(), key, "start")
    event(_history(), key, "fail")
    raise ValueError(f"poison: {key} always fails")


def slow(payload: dict) -> None:
    """Sleeps exactly ``sleep`` seconds, then succeeds."""
    key = payload["k"]
    event(_history(), key, "start")
    time.sleep(float(payload.get("sleep", 0)))
    event(_history(), key, "success")


def meet(payload: dict) -> None:
    """Like :func:`slow`, but first waits (at most ``within`` s, default 120) until
    ``meet`` runs are under way at once: a test that asserts a cap is used then
    needs no drain to start within some time of another, however slow the machine."""
    key = payload["k"]
    path = _history()
    event(path, key, "start")
    want = int(payload.get("meet", 0))
    end = time.monotonic() + float(payload.get("within", 120))
    while want and time.monotonic() < end:
        running: set[str] = set()
        for r in read(path):
            if r["event"] == "start":
                running.add(r["msg"])
            elif r["event"] in ("success", "fail"):
                running.discard(r["msg"])
        if len(running) >= want:
            break
        time.sleep(0.02)
    time.sleep(float(payload.get("sleep", 0)))
    event(path, key, "success")


def ticking(payload: dict) -> None:
    """Runs ``sleep`` seconds, writing a tick every TICK s to $MQ_FAULT_HISTORY.ticks,
    then succeeds: the last tick of a killed run says until when it was alive."""
    key = payload["k"]
    path = _history()
    event(path, key, "start")
    end = time.monotonic() + float(payload.get("sleep", 0))
    while time.monotonic() < end:
        record(path + ".ticks", msg=key, pid=os.getpid(), t=time.time())
        time.sleep(min(TICK, max(end - time.monotonic(), 0.0)))
    event(path, key, "success")


TICK = 0.05


def roundtrip(payload: object) -> None:
    """Records what it received, exactly: bytes as base64, anything else as JSON."""
    # mq_cli.current_message() is what the README documents, but it is not
    # exported (see test_contract_gaps.py): the module's own function.
    info = current_message()
    if isinstance(payload, bytes):
        got = {"type": "bytes", "value": base64.b64encode(payload).decode()}
    else:
        got = {"type": type(payload).__name__, "value": json.dumps(payload, sort_keys=True)}
    record(_history(), id=info.id, queue=info.queue, **got)


def capture() -> int:
    """exec: handler: record argv and stdin, succeed."""
    data = sys.stdin.buffer.read()
    record(
        _history(),
        argv=sys.argv[2:],
        stdin=base64.b64encode(data).decode(),
        id=int(os.environ.get("MQ_MESSAGE_ID", "0")),
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["capture"]:
        sys.exit(capture())
    if sys.argv[1:2] == ["ticking"]:  # exec: handler: the drain is our parent
        ticking(json.loads(sys.stdin.buffer.read()))
        sys.exit(0)
    sys.exit(f"usage: {sys.argv[0]} capture [ARGS...] | ticking")
