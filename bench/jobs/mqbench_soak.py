"""The soak's handler (bench/soak.py): records when each message starts, fails as planned.

Payload: {"t": enqueue time (Unix s, the producer's clock), "d": delay (s), "f": planned
failures (0 none, N: fails its first N tries, -1: fails every try), "pad": ...}.
On a message's first try it appends "<start> <start - (t + d)>" to $MQSOAK_START_LOG:
enqueue-to-start latency, measured from when the message was due (same host, same clock).
"""

from __future__ import annotations

import os
import time

_log: int | None = None


def handle(payload: dict) -> None:
    global _log
    from mq_cli.runners.handlers import current_message

    started = time.time()
    tries = current_message().error_count
    if tries == 0:
        if _log is None:
            _log = os.open(os.environ["MQSOAK_START_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        due = payload["t"] + payload["d"]
        os.write(_log, b"%.3f %.4f\n" % (started, started - due))
    fails = payload.get("f", 0)
    if fails < 0 or tries < fails:
        raise RuntimeError(f"soak: planned failure (try {tries + 1})")
