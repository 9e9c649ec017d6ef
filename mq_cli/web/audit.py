"""The record of what operators did through the console: who, what, how many, when.

One JSON object a line, one line an action: the person, the action, the
queue, how many messages really changed state, and the exact filter or ids.
Appended to ``web.audit_log`` (created 0600 in a 0700 directory): each
append is a single ``write`` on an ``O_APPEND`` file, so several console
processes on one host never interleave their lines. The console's Actions
page shows the newest entries. Each line also goes to the "mq.audit"
logger, for a host application that collects its logs.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from mq_cli.core.errors import ConfigError
from mq_cli.core.states import Action

log = logging.getLogger("mq.audit")
#: bytes read from the end of the file for the page: far more than SHOWN lines
TAIL_BYTES = 1 << 20
SHOWN = 200
REQUIRED = ("at", "who", "action", "queue", "count", "detail")


@dataclass(frozen=True)
class Entry:
    at: str  # ISO 8601 UTC, this host's clock
    who: str
    action: str  # retry, delete, pause, resume, requeue-stalled, requeue-failed, purge
    queue: str | None
    count: int  # messages whose state really changed (pause/resume: 1 if it changed)
    detail: str = ""  # the same in words, what was refused
    #: the filter acted on: {"state", "error", "key"} (purge: the state), None for ids
    filter: dict[str, Any] | None = None
    #: the ids acted on (all of ``queue``: ids of other queues are never listed)
    ids: list[int] | None = None
    #: the table's last id when the operator confirmed: nothing after it was touched
    upto: int | None = None
    force: bool | None = None
    #: what became of them: requeue {"ready": N, "failed": M}; by id or filter the ones
    #: not done ({"refused": N, "missing": M, "not_in_queue": K})
    outcome: dict[str, int] | None = None


class AuditLog:
    def __init__(self, path: str):
        self.path = path

    def record(
        self,
        who: str,
        action: Action,
        queue: str | None,
        count: int,
        detail: str = "",
        **fields: Any,
    ) -> Entry:
        """Append one line; ``fields`` are Entry's optional ones (filter, ids, ...)."""
        now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        entry = Entry(now, who, action, queue, count, detail, **fields)
        # the optional fields only where they say something: lines stay short
        kept = {k: v for k, v in asdict(entry).items() if v is not None or k in REQUIRED}
        line = json.dumps(kept, ensure_ascii=False) + "\n"
        directory = os.path.dirname(self.path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            # The action is done already: say that its record is missing.
            raise ConfigError(
                f"{action} done, but the audit log {self.path} cannot be written: "
                f"{exc.strerror}; set web.audit_log to a file this user can write"
            ) from None
        log.info("%s", line.rstrip("\n"))
        return entry

    def newest(self, limit: int = SHOWN) -> list[Entry]:
        """The last ``limit`` entries, newest first."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(size - TAIL_BYTES, 0))
                data = handle.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConfigError(f"cannot read the audit log {self.path}: {exc.strerror}") from None
        lines = data.decode("utf-8", "replace").splitlines()
        if size > TAIL_BYTES:
            lines = lines[1:]  # cut in the middle
        kept: deque[Entry] = deque(maxlen=limit)
        for line in lines:
            try:
                kept.append(Entry(**json.loads(line)))
            except (ValueError, TypeError):
                continue
        return list(reversed(kept))
