"""Whether the drain that holds a message is alive, from a lock that dies with it.

Each drain holds a lock named after its owner token for as long as it runs: on
MariaDB/MySQL a ``GET_LOCK``, on PostgreSQL a session advisory lock (both die
with the drain's database session), on SQLite (one host) an flock on a file in
the lock directory (it dies with the process). A `processing` message whose
owner's lock is free is dead at once: gc, `requeue_stalled` drains and the
counts treat it as stalled without waiting for ``stalled_after``.

Tokens of drains that hold such a lock end in ``LIVE_MARK``; any other owner
(an older mq, Galera, a server that refused the lock) is judged by its
heartbeat alone, as before.

No false deaths. A drain whose session ends while it lives (a cut connection, a
server restart) no longer proves anything, and gc may take its messages at
once. So gc waits until a lock has been free for ``SUSPECT`` seconds (a drain
whose connection was cut takes it back sooner), a message gc takes from a dead
owner becomes ready only ``GRACE`` seconds later, and the drain stops its
running handler when it has had no proof of its session for ``FENCE`` seconds
(a watchdog thread, so a query stuck on a dead socket cannot delay it): the old
run is over before a new one can start. After a reconnect the drain takes its lock again and checks, with an
owner-guarded heartbeat, that it still holds what it held; anything gone and it
stops (exit 3), leaving the rest to gc.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol


class Backend(Protocol):
    """What the lock looks need of a backend (backends/base.py has it all)."""

    kind: str
    lock_dir: str
    #: base.Caps: file_locks tells a drain's liveness by flocks in lock_dir
    caps: Any

    def live_lock_free(self, owner: str) -> bool: ...

    def live_lock_seize(self, owner: str) -> bool: ...

    def live_lock_release(self, owner: str) -> None: ...

    def processing_owners(self, queue: str) -> list[str]: ...

    def mark_dead(self, queue: str, owner: str) -> int: ...


LIVE_MARK = ":L"
#: seconds a drain may go without proof of its session before it stops its handler
FENCE = 2.0
#: seconds a server lock must stay free before its drain counts as dead (a drain
#: whose connection was cut takes it back within a second)
SUSPECT = 1.5
#: seconds a dead owner's requeued message waits before it is ready again:
#: SUSPECT + GRACE > FENCE, so the old run is stopped before a new one starts
GRACE = 1.5
#: how often a drain proves its session while a handler runs
PROBE_EVERY = 0.5
#: how often the watchdog looks
WATCH_EVERY = 0.1
#: a watchdog that woke this much later than it asked was stopped or starved
STALE_WAKE = 0.5


def _sha256(owner: str) -> Any:
    import hashlib  # here, not at the top: OpenSSL costs every `mq enqueue` ~3 ms to load

    return hashlib.sha256(owner.encode())


def is_live_token(owner: str | None) -> bool:
    return bool(owner) and owner.endswith(LIVE_MARK)  # type: ignore[union-attr]


def lock_name(owner: str) -> str:
    """A server lock name for ``owner``: MySQL's names hold 64 characters."""
    return "mq:" + _sha256(owner).hexdigest()[:40]


def lock_key(owner: str) -> int:
    """A PostgreSQL advisory lock key (a signed 64-bit integer) for ``owner``."""
    return int.from_bytes(_sha256(owner).digest()[:8], "big", signed=True)


# -- on SQLite: a file per drain -----------------------------------------------------


def _lock_file(lock_dir: str, owner: str) -> Path:
    return Path(lock_dir) / "drains" / (_sha256(owner).hexdigest()[:40] + ".lock")


class FileLock:
    """The drain's own flock (SQLite: every drain of the file is on this host)."""

    def __init__(self, lock_dir: str, owner: str):
        self.path = _lock_file(lock_dir, owner)
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        if self.fd >= 0:
            try:
                self.path.unlink()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = -1


@contextmanager
def _seize_file(lock_dir: str, owner: str, clear: bool) -> Iterator[bool]:
    """True inside when ``owner``'s file exists and nobody holds it (its drain died);
    held meanwhile, so two gcs do not both act. ``clear``: remove the file after (its
    messages were marked)."""
    path = _lock_file(lock_dir, owner)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        # No file here: a drain with another lock_dir, or one gc already cleared.
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            yield False
            return
        yield True
        if clear:
            try:
                path.unlink()
            except OSError:
                pass
    finally:
        os.close(fd)


# -- what gc, stats and list use --------------------------------------------------------


def dead_owners(backend: Backend, lock_dir: str, owners: Iterable[str | None]) -> set[str]:
    """Those of ``owners`` that hold a lock no more (a read: nothing is taken)."""
    dead = set()
    for owner in {o for o in owners if is_live_token(o)}:
        assert owner is not None
        if backend.caps.file_locks:
            with _seize_file(lock_dir, owner, clear=False) as free:
                if free:
                    dead.add(owner)
            continue
        if backend.live_lock_free(owner):
            dead.add(owner)
    return dead


def mark_dead(backend: Backend, queue: str, suspects: dict[str, float] | None = None) -> int:
    """Mark the `processing` messages of ``queue`` whose drain is gone as stalled now;
    how many.

    A server lock is free for a moment when a live drain's connection is cut: the
    drain reconnects and takes it back within a second. So a lock must be seen
    free for SUSPECT seconds before its owner counts as dead: ``suspects`` (owner
    -> when first seen free) carries that between the looks of a long-running
    caller; without it this call waits SUSPECT, looking again meanwhile. The dead
    owner's lock is held while its messages are marked, so it cannot come back
    in between. (SQLite's file locks die with the process only: no wait.)
    """
    lock_dir = backend.lock_dir
    marked = 0
    owners = [o for o in backend.processing_owners(queue) if is_live_token(o)]
    if backend.caps.file_locks:
        for owner in owners:
            with _seize_file(lock_dir, owner, clear=True) as dead:
                if dead:
                    marked += backend.mark_dead(queue, owner)
        return marked
    free = [owner for owner in owners if backend.live_lock_free(owner)]
    if suspects is None:
        # Look again every quarter second: a drain whose link keeps being cut
        # holds its lock at some look, and is no suspect any more.
        looks = max(1, round(SUSPECT / 0.25))
        for _ in range(looks):
            if not free:
                return 0
            time.sleep(SUSPECT / looks)
            free = [owner for owner in free if backend.live_lock_free(owner)]
        ripe = free
    else:
        now = time.monotonic()
        for owner in set(suspects) - set(free):
            del suspects[owner]
        ripe = [o for o in free if now - suspects.setdefault(o, now) >= SUSPECT]
    for owner in ripe:
        if backend.live_lock_seize(owner):
            try:
                marked += backend.mark_dead(queue, owner)
            finally:
                backend.live_lock_release(owner)
        if suspects is not None:
            suspects.pop(owner, None)
    return marked
