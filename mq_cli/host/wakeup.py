"""A waiting drain (`--wait`) starts a message within milliseconds of its enqueue
on the same host, or of its enqueue on any host on PostgreSQL, instead of at its
next poll.

A waiting drain makes a FIFO ``LOCK_DIR/db-ID/wake/QUEUE.PID`` and sleeps in
``select()`` on it, for at most its poll interval. A producer of the same user
on the same host (the CLI, or the Python API with mq's own connection) writes
one byte into each FIFO of the queue after its transaction commits. ``db-ID``
is the directory of the database and table (slots.database_dir): an enqueue
wakes the drains of its own database only, not those of another config's queue
of the same name. Nothing
depends on the byte arriving: without one (a producer on another host, a
message whose delay ends, an application's own transaction) the drain still
polls at least once a second.

On PostgreSQL the waiting drain also LISTENs on the table's channel, and every
enqueue of ready messages NOTIFYs it in its own transaction (delivered at
commit, an application's transaction included): producers on other hosts wake
it too.
"""

from __future__ import annotations

import errno
import os
import select
import time
from typing import TYPE_CHECKING

from mq_cli.core.errors import ConfigError
from mq_cli.host.slots import ensure_lock_dir

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend


def _directory(database_dir: str) -> str:
    return os.path.join(database_dir, "wake")


class Waiter:
    """The FIFO of one waiting drain of one queue, and the database's own wake-up
    where it has one (PostgreSQL's LISTEN, for producers on any host)."""

    def __init__(self, database_dir: str, queue: str, backend: Backend | None = None):
        self.queue = queue
        self.backend = backend
        self.fd = -1
        directory = _directory(database_dir)
        self.path = os.path.join(directory, f"{queue}.{os.getpid()}")
        try:
            ensure_lock_dir(directory)  # 0700 and ours: nobody else can plant a FIFO here
            try:
                os.unlink(self.path)  # a dead drain's, whose pid this process now has
            except FileNotFoundError:
                pass
            os.mkfifo(self.path, 0o600)
            # Read and write: with a writer always open (ourselves) the FIFO never
            # reads as end-of-file, so select() sleeps until a producer writes.
            self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, ConfigError):
            if backend is None or backend.listen(queue) is None:
                raise
            self.listening = True  # another host's producers still wake it
            return
        self.listening = backend is not None and backend.listen(queue) is not None

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a producer woke us."""
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            # Looked up each time: a reconnect replaces the database's descriptor.
            db_fd = self.backend.listen_fd() if self.backend and self.listening else None
            fds = [fd for fd in (self.fd, db_fd) if fd is not None and fd >= 0]
            try:
                ready, _, _ = select.select(fds, [], [], max(end - time.monotonic(), 0.0))
            except (OSError, ValueError):  # the database's descriptor closed meanwhile
                return True
            if not ready:
                return False
            if self.fd >= 0 and self.fd in ready:
                try:
                    while os.read(self.fd, 4096):
                        pass
                except BlockingIOError:
                    pass
                return True
            assert self.backend is not None
            if self.backend.woken(self.queue):
                return True
            # Another queue's enqueue: sleep on.

    def close(self) -> None:
        if self.fd < 0:
            return
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def notify(database_dir: str, queue: str) -> None:
    """Wake every drain of this database waiting for ``queue`` on this host (their
    FIFOs are in ``database_dir``, slots.database_dir); never fails."""
    directory = _directory(database_dir)
    try:
        names = os.listdir(directory)
    except OSError:  # no drain ever waited here, or not ours to look into
        return
    prefix = f"{queue}."
    for name in names:
        if not (name.startswith(prefix) and name[len(prefix) :].isdigit()):
            continue  # another queue's (queue names may contain dots)
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no reader: its drain died; tidy up
                try:
                    os.unlink(path)
                except OSError:
                    pass
            continue
        try:
            os.write(fd, b"\0")
        except OSError:  # full: bytes are waiting already, it will wake
            pass
        finally:
            os.close(fd)
