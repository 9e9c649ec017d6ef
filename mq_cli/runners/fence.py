"""Finding every process a handler started, however it was started, to kill them.

A handler runs in a session of its own, but what it starts can leave that
session (``setsid``, a daemon's double fork), and once a parent dies its
children's parent pid says nothing any more: the kernel hands orphans to init.
A drain killed with -9 is such a parent, so neither its pid nor its handler's
process group finds what is left of the handler.

What survives both is the environment. Every handler is started with
``MQ_FENCE=<drain's token>.<n>`` (:func:`next_mark`), which everything it
starts inherits. A handler's processes are those whose environment carries its
mark, and whatever shares a session with one of them (a program that cleared
its environment but stayed in the session). A process that both leaves its
session and clears its environment is not found: only a cgroup could. That
is the edge handlers.md documents: such a process is the handler's to keep.

Standard library only: the guard (guard.py), run as a script, imports it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection

VAR = "MQ_FENCE"
#: rounds of look-and-kill before giving up on a tree that keeps forking
ROUNDS = 200

_token: tuple[int, str] | None = None
_count = 0


def token() -> str:
    """This process's token, new in each process (a fork included)."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        # os.urandom is what secrets.token_hex reads, without secrets' imports (hmac,
        # hashlib, random: ~3 ms of every drain's start)
        _token = (pid, f"{pid}x{os.urandom(6).hex()}")
    return _token[1]


def next_mark() -> str:
    """The mark for the next handler process this process starts."""
    global _count
    _count += 1
    return f"{token()}.{_count}"


def _stat(pid: str) -> tuple[bytes, int, int] | None:
    """(state, process group, session) of a process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2]), int(fields[3])


def _environ(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return b"\0" + environ.read()
    except OSError:  # gone, or another user's
        return b""


def find(needle: bytes, sessions: Collection[int], spare: Collection[int]) -> set[int]:
    """Live processes whose environment holds ``needle`` or that are in one of
    their sessions or in ``sessions``, but never one in ``spare``'s sessions."""
    me = os.getpid()
    live: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _stat(name)
        if stat is None or stat[0] in (b"Z", b"X"):
            continue
        live[int(name)] = (stat[1], stat[2])
    protected = {me, *spare}
    safe = {group for pid in protected if pid in live for group in live[pid]}
    marked = {pid for pid in live if pid not in protected and needle in _environ(str(pid))}
    groups = ({live[pid][1] for pid in marked} | set(sessions)) - safe
    return {
        pid
        for pid, (pgrp, sid) in live.items()
        if pid not in protected and (pid in marked or sid in groups or pgrp in groups)
    }


def sweep(mark: str, *, whole_token: bool = False, sessions: Collection[int] = (),
          spare: Collection[int] = ()) -> int:  # fmt: skip
    """SIGKILL every process of handler ``mark`` (of every handler of token
    ``mark`` with ``whole_token``), until none is left; how many were killed."""
    needle = f"\0{VAR}={mark}".encode() + (b"." if whole_token else b"\0")
    killed: set[int] = set()
    for _ in range(ROUNDS):
        victims = find(needle, sessions, spare)
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed |= victims
        time.sleep(0.002)  # let the kernel make them zombies before we look again
    return len(killed)
