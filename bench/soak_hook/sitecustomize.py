"""Times mq's own claims inside the soak's `mq drain` processes (bench/soak.py).

bench/soak.py puts this directory on the drains' PYTHONPATH with MQSOAK_CLAIM_LOG
set; Python imports sitecustomize at start, and this wraps the one claim every
SQL backend inherits (SqlBackend.claim: promotion of due delayed rows included,
as the drain pays it) to append "<unix time> <seconds> <messages>" per claim.
Without MQSOAK_CLAIM_LOG it does nothing.
"""

from __future__ import annotations

import os

_path = os.environ.get("MQSOAK_CLAIM_LOG")
if _path:
    import time

    try:
        from mq_cli.backends import sqlcore
    except Exception:  # noqa: BLE001 - never break a process over a measurement
        sqlcore = None  # type: ignore[assignment]
    if sqlcore is not None:
        _inner = sqlcore.SqlBackend.claim
        _fd: list[int] = []

        def _timed_claim(self, queue, limit, owner):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            messages = _inner(self, queue, limit, owner)
            seconds = time.perf_counter() - started
            if not _fd:
                _fd.append(os.open(_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
            os.write(_fd[0], b"%.3f %.6f %d\n" % (time.time(), seconds, len(messages)))
            return messages

        sqlcore.SqlBackend.claim = _timed_claim  # type: ignore[method-assign]
