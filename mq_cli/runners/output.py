"""What a handler prints: only its end is kept, so gigabytes of output cost no memory."""

from __future__ import annotations

import os

from mq_cli.core import terminal

TAIL_BYTES = 16 * 1024  # enough for ERROR_LIMIT characters of any UTF-8


class Tail:
    """The last TAIL_BYTES bytes written to a pipe, and how many came in all."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > TAIL_BYTES:
            del self.data[:-TAIL_BYTES]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace").strip()

    def to_stderr(self) -> None:
        """Write what was kept to our stderr (saying how much was left out), then forget it."""
        if not self.total:
            return
        data = bytes(self.data)
        if self.total > len(data):
            note = f"mq: handler output: {self.total - len(data)} earlier bytes left out\n"
            data = note.encode() + data
        if not data.endswith(b"\n"):
            data += b"\n"
        self.data.clear()
        self.total = 0
        terminal.clear()  # a drain's status line at a terminal: the output starts on its own
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(2, view) :]
        except OSError:  # stderr closed or full (cron gone): the output is lost, not us
            pass
