"""A waiting drain (`--wait`) starts a message within milliseconds of its enqueue
on the same host, instead of at its next poll.

A waiting drain makes a FIFO ``LOCK_DIR/wake/QUEUE.PID`` and sleeps in
``select()`` on it, for at most its poll interval. A producer of the same user
on the same host (the CLI, or the Python API with mq's own connection) writes
one byte into each FIFO of the queue after its transaction commits. Nothing
depends on the byte arriving: without one (a producer on another host, a
message whose delay ends, an application's own transaction) the drain still
polls at least once a second.
"""

from __future__ import annotations

import errno
import os
import select

from .slots import ensure_lock_dir


def _directory(lock_dir: str) -> str:
    return os.path.join(lock_dir, "wake")


class Waiter:
    """The FIFO of one waiting drain of one queue."""

    def __init__(self, lock_dir: str, queue: str):
        directory = _directory(lock_dir)
        ensure_lock_dir(directory)  # 0700 and ours: nobody else can plant a FIFO here
        self.path = os.path.join(directory, f"{queue}.{os.getpid()}")
        try:
            os.unlink(self.path)  # a dead drain's, whose pid this process now has
        except FileNotFoundError:
            pass
        os.mkfifo(self.path, 0o600)
        # Read and write: with a writer always open (ourselves) the FIFO never
        # reads as end-of-file, so select() sleeps until a producer writes.
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a producer woke us."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
        if not ready:
            return False
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def notify(lock_dir: str, queue: str) -> None:
    """Wake every drain waiting for ``queue`` on this host; never fails."""
    directory = _directory(lock_dir)
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
