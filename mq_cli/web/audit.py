"""The record of what operators did through the console: who, what, how many, when.

One JSON object a line, appended to ``web.audit_log`` (created 0600 in a 0700
directory): each append is a single ``write`` on an ``O_APPEND`` file, so
several console processes on one host never interleave their lines. The
console's Actions page shows the newest entries. Each line also goes to the
"mq.audit" logger, for a host application that collects its logs.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from mq_cli.core.errors import ConfigError

log = logging.getLogger("mq.audit")
#: bytes read from the end of the file for the page: far more than SHOWN lines
TAIL_BYTES = 1 << 20
SHOWN = 200


@dataclass(frozen=True)
class Entry:
    at: str  # ISO 8601 UTC, this host's clock
    who: str
    action: str  # retry, delete, pause, resume, requeue-stalled, requeue-failed, purge
    queue: str | None
    count: int  # messages changed (pause/resume: 1 if it changed anything)
    detail: str = ""  # the ids or the filter, what was refused


class AuditLog:
    def __init__(self, path: str):
        self.path = path

    def record(
        self, who: str, action: str, queue: str | None, count: int, detail: str = ""
    ) -> Entry:
        now = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        entry = Entry(now, who, action, queue, count, detail)
        line = json.dumps(asdict(entry), ensure_ascii=False) + "\n"
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
