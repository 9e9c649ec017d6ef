"""Child processes of a runner: a kill of a whole handler, the words for a death,
a pidfd that tells an exit at once (and a wait woken by it), and descriptors kept
off stdin/out/err.
"""

from __future__ import annotations

import fcntl
import math
import os
import select
import signal
import subprocess
from typing import Any

from mq_cli.runners import fence


def death(returncode: int) -> str:
    """'exit code N' or 'signal N (SIGNAME)' for a Popen returncode."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    return f"signal {-returncode} ({name})"


def kill_handler(pid: int, mark: str) -> None:
    """SIGKILL a handler process that leads its own session, and everything it
    started, wherever that went (fence.py); quiet for what is already gone."""
    kill_group(pid)
    fence.sweep(mark, sessions=(pid,), spare=(os.getpid(),))


def kill_group(pid: int) -> None:
    """SIGKILL a process group; quiet when it is already gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _above_stdio(fd: int) -> int:
    # With stdout closed (`mq drain >&-` in a crontab) a new pipe could get
    # fd 1, and the handler's prints would land in our protocol.
    if fd > 2:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return high


def _pidfd(pid: int) -> int:
    """A descriptor that polls readable when ``pid`` exits; -1 where Linux < 5.3 has none."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return -1
    try:
        return int(pidfd_open(pid))
    except OSError:
        return -1


def wait_exited(proc: subprocess.Popen[Any], timeout: float, pidfd: int = -1) -> int:
    """``proc.wait(timeout)``, woken the moment it exits (``pidfd``, or one of its own):
    Popen's wait sleeps in doubling steps of up to 50 ms, so an exit 6 ms in is seen
    at 7.5 and one at 16 ms at 31.5, at the end of every drain. Raises
    subprocess.TimeoutExpired as Popen's does."""
    own = -1 if pidfd >= 0 or proc.returncode is not None else _pidfd(proc.pid)
    watch = pidfd if pidfd >= 0 else own
    if watch < 0:
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(watch, select.POLLIN)
        poller.poll(math.ceil(timeout * 1000))
    finally:
        if own >= 0:
            os.close(own)
    return proc.wait(timeout=0)
