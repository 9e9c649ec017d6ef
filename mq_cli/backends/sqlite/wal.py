"""Noticing that the ``-wal`` / ``-shm`` files of an open SQLite database were deleted.

They belong to the database: while a connection is open, SQLite keeps writing
into the WAL file it opened. Deleted (a cleanup script, an operator tidying
up), that file lives on unlinked in this process only; other processes start
a new one, and every commit made here from then on is lost to them, though
reported as done. Nothing in SQLite tells us, so we look: the files' identity
(device, inode) when the connection opened them against what the paths name
now. Our connection keeps the old inodes in use, so a recreated file cannot
reuse one. Two stat() calls, ~3 µs each: after every write (a claim, an
enqueue: what is reported done), but at most every ``ACK_EVERY`` seconds after
a drain's acknowledgements and heartbeats (one lost to a deleted file only runs
its message again, and the drain's next claim checks at its commit; see
SqliteBackend._ack_change).
"""

from __future__ import annotations

import os
import time

from mq_cli.core.errors import DatabaseError

SUFFIXES = ("-wal", "-shm")
#: seconds between two checks after single statements (a drain acknowledges thousands a second)
ACK_EVERY = 0.02


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


class WalGuard:
    """The identity of a database's -wal and -shm files, checked at each write."""

    def __init__(self, path: str) -> None:
        self.paths = [path + suffix for suffix in SUFFIXES]
        self.known: list[tuple[int, int] | None] = [None, None]
        self.checked = 0.0  # time.monotonic() of the last check

    def remember(self) -> None:
        """Call once the connection has the files open (after its first read)."""
        self.known = [_identity(p) for p in self.paths]

    def check_soon(self) -> None:
        """:meth:`check`, unless one ran within the last ACK_EVERY seconds."""
        if time.monotonic() - self.checked >= ACK_EVERY:
            self.check()

    def check(self) -> None:
        """DatabaseError if a file we opened is gone or replaced."""
        self.checked = time.monotonic()
        for index, path in enumerate(self.paths):
            now = _identity(path)
            known = self.known[index]
            if known is None:  # not there when we opened (not in WAL mode yet): learn it
                self.known[index] = now
            elif now != known:
                raise DatabaseError(
                    f"{path} was deleted or replaced while mq had the database open, so what "
                    "this process writes could be lost; mq stopped.\nThe -wal and -shm files "
                    "belong to the database: never delete them while mq runs"
                )
