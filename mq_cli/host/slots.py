"""Per-host drain slots: at most ``concurrency`` drains of a queue on one host.

Slots belong to one database and table: slot n of queue Q is the lock file
``LOCK_DIR/db-ID/Q.n.lock``, where ID names the database and table
(core/identity.py), so two configs of one user on one host never share a slot;
``LOCK_DIR/db-ID/database`` says which database that is, for operators. A slot
is held with ``flock``. The kernel drops the lock when its holder exits,
however it exits (kill -9 included), so there is never a stale lock to clean
up; that is also why the files are never deleted (deleting a lock file lets two
processes hold "the same" slot through different inodes). The holder's pid is
written into the file for operators
(``cat ~/.local/state/mq/locks/db-*/mail.0.lock``), then the Unix time at which
it ends (its --max-seconds), if it has one.

That end is what lets crontab runs overlap without a dead window: the next
minute's drain finds every slot busy, reads that one ends within
:data:`HANDOVER_WITHIN`, and waits to take it over (:func:`take_over`) instead
of leaving the queue undrained until the minute after.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mq_cli.core.errors import ConfigError
from mq_cli.core.identity import database_id

if TYPE_CHECKING:
    from mq_cli.core.config import Config

log = logging.getLogger("mq")

_QUEUE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")

#: a drain that finds every slot busy waits for one whose holder ends this soon
HANDOVER_WITHIN = 5.0
#: and waits that long past the holder's announced end at most (its last handler, then
#: its acknowledgements), or until its own --max-seconds, whichever comes first
HANDOVER_PATIENCE = 60.0
HANDOVER_POLL = 0.02

log = logging.getLogger("mq")


def ensure_lock_dir(path: str) -> None:
    """Create ``path`` (mode 0700, with missing parents) or check the one that exists.

    Lock files decide which drains run. In a shared directory such as /tmp,
    a directory someone else owns or can write to would let them hold our
    slots (no drain runs) or swap lock files, so it is refused, as is a
    symlink, rather than trusted.
    """
    for directory in reversed(_missing(path)):
        try:
            os.mkdir(directory, 0o700)
            os.chmod(directory, 0o700)  # whatever the umask said
        except FileExistsError:  # another drain got there first; checked below
            pass
        except OSError as exc:
            raise _cannot_create(path, exc.strerror or str(exc)) from None
    _check_existing(path)


def inspect_lock_dir(path: str) -> bool:
    """What :func:`ensure_lock_dir` would say, without creating anything (`mq check`):
    True when ``path`` exists and is fit, False when it is missing and the first drain
    can create it; ConfigError when it is unfit or cannot be created."""
    missing = _missing(path)
    if not missing:
        _check_existing(path)
        return True
    parent = os.path.dirname(missing[-1])  # the nearest ancestor that exists
    if not os.path.isdir(parent):
        raise _cannot_create(path, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _cannot_create(path, f"{parent} is not writable for this user")
    return False


def _missing(path: str) -> list[str]:
    """``path`` and its ancestors that do not exist, nearest first."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return missing


def _cannot_create(path: str, why: str) -> ConfigError:
    return ConfigError(
        f"cannot create lock_dir {path}: {why}; create it (mode 700) or set lock_dir in the config"
    )


def _check_existing(path: str) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(
            f"lock_dir {path} is a symlink, which mq does not follow; "
            "remove it or set lock_dir to a real directory"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"lock_dir {path} exists but is not a directory; remove it or set lock_dir elsewhere"
        )
    if info.st_uid != os.geteuid():
        raise ConfigError(
            f"lock_dir {path} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}); remove it or set lock_dir to a directory you own"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"lock_dir {path} is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):o}); run `chmod 700 {path}`"
        )


def database_dir(config: Config) -> str:
    """The lock_dir's directory for ``config``'s database and table (a path only:
    nothing is made or checked; see open_database_dir)."""
    return os.path.join(config.lock_dir, "db-" + database_id(config.database, config.table))


def open_database_dir(config: Config) -> str:
    """database_dir, made and checked like the lock_dir itself (which is checked
    too: a directory others can write to could swap ours), with a ``database``
    file that names the database for operators; its path."""
    ensure_lock_dir(config.lock_dir)
    path = database_dir(config)
    ensure_lock_dir(path)
    about = os.path.join(path, "database")
    if not os.path.lexists(about):
        text = f"{config.database.describe()} table {config.table}\n"  # never a password
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(about, flags, 0o600)
        except OSError:  # another drain wrote it first, or a full disk: only a note
            return path
        try:
            os.write(fd, text.encode())
        except OSError:
            pass
        finally:
            os.close(fd)
    return path


class Slot:
    """A held slot; the lock lasts until release() or until this process ends."""

    def __init__(self, path: str, number: int, fd: int) -> None:
        self.path = path
        self.number = number
        self._fd = fd

    def __repr__(self) -> str:
        state = "held" if self._fd >= 0 else "released"
        return f"<Slot {self.number} {self.path} {state}>"

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, 0)  # no pid: nobody holds it
        except OSError:
            pass
        os.close(self._fd)  # closing the last descriptor drops the flock
        self._fd = -1


def _open_lock_file(path: str) -> int:
    # O_NOFOLLOW: a symlink planted here must not make us create or lock a
    # file elsewhere. O_CLOEXEC: handlers and their daemons must not inherit
    # the descriptor, or the slot would stay busy after the drain exits.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise ConfigError(
                f"lock file {path} is a symlink, which mq does not follow; remove it"
            ) from None
        raise ConfigError(
            f"cannot open lock file {path}: {exc.strerror}; check lock_dir's permissions"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise ConfigError(f"lock file {path} is not a regular file owned by this user; remove it")
    return fd


def acquire(
    lock_dir: str, queue: str, concurrency: int, ends_at: float | None = None
) -> Slot | None:
    """The first free slot of ``queue`` among the lock files in ``lock_dir`` (a
    drain's: its database_dir), or None when all are busy. ``ends_at``: the Unix
    time the drain ends (written into the slot for :func:`take_over`), if it knows.

    Never waits: a drain started by cron while others still run simply has
    nothing to do. Checks the lock directory first (see ensure_lock_dir).
    """
    if not _QUEUE.match(queue):
        raise ConfigError(f"queue name {queue!r} is not 1-64 characters of A-Z a-z 0-9 _ . -")
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
    ensure_lock_dir(lock_dir)
    for number in range(concurrency):
        path = os.path.join(lock_dir, f"{queue}.{number}.lock")
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError:
            os.close(fd)
            raise
        try:
            # Only now: truncating before the lock is ours would erase the
            # pid of the drain that holds it.
            os.ftruncate(fd, 0)
            end = f" {ends_at:.3f}" if ends_at is not None else ""
            os.pwrite(fd, f"{os.getpid()}{end}\n".encode(), 0)
        except OSError:  # a full disk must not stop the drain; the lock is what counts
            pass
        return Slot(path, number, fd)
    return None


def ending_at(lock_dir: str, queue: str, concurrency: int) -> float | None:
    """The earliest end (Unix time) that a holder of one of ``queue``'s slots
    announced; None when none did (no --max-seconds) or none is held."""
    ends = []
    for number in range(concurrency):
        path = os.path.join(lock_dir, f"{queue}.{number}.lock")
        try:
            with open(path, "rb") as file:
                fields = file.read(100).split()
        except OSError:
            continue
        try:
            ends.append(float(fields[1]))
        except (IndexError, ValueError):
            continue
    return min(ends, default=None)


def take_over(
    lock_dir: str,
    queue: str,
    concurrency: int,
    ends_at: float | None,
    stop: Callable[[], bool],
) -> Slot | None:
    """When every slot is busy but one's holder ends within HANDOVER_WITHIN: wait
    for it and take its slot (None if it does not come, or ``stop()`` says so first).

    Cron starts the next run of a line while the last one ends (`--max-seconds
    60`): waiting for it, instead of exiting at once, leaves no part of the minute
    without a drain.
    """
    end = ending_at(lock_dir, queue, concurrency)
    if end is None or end - time.time() > HANDOVER_WITHIN:
        return None
    if ends_at is not None and ends_at <= end:
        return None  # this run would end before the holder does: nothing to take over
    give_up = end + HANDOVER_PATIENCE
    if ends_at is not None:
        give_up = min(give_up, ends_at)
    log.info(
        "queue %s: all %d slot(s) busy; one's drain ends at %s: waiting to take it over",
        queue, concurrency, time.strftime("%H:%M:%S", time.localtime(end)),
    )  # fmt: skip
    while time.time() < give_up and not stop():
        time.sleep(HANDOVER_POLL)
        slot = acquire(lock_dir, queue, concurrency, ends_at)
        if slot is not None:
            return slot
    return None


def take(
    lock_dir: str,
    queue: str,
    concurrency: int,
    ends_at: float | None,
    stop: Callable[[], bool],
) -> Slot | None:
    """A slot of ``queue`` for a drain: a free one (:func:`acquire`), else the one a
    drain that ends now gives up (:func:`take_over`: cron's next run of the line);
    None, said at -v, when all stay busy."""
    slot = acquire(lock_dir, queue, concurrency, ends_at)
    if slot is None:
        slot = take_over(lock_dir, queue, concurrency, ends_at, stop)
        if slot is not None:
            log.info("queue %s: took over a slot from a drain that ended", queue)
    if slot is None:
        log.info("queue %s: all %d slot(s) busy on this host", queue, concurrency)
    return slot
