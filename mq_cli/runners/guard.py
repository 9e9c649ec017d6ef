"""A handler never outlives its drain's ability to stop it.

Handlers run in sessions of their own (a terminal's Ctrl-C reaches the drain,
which lets the running handler finish), so nothing stops them when their drain
is stopped: SIGSTOP of the drain or of its process group, Ctrl-Z, a drain
frozen or starved. Such a drain can neither heartbeat its messages nor fence
its handler; gc rightly requeues them after ``stalled_after`` and another drain
runs them, while the first run would go on.

So while a handler may run, the drain keeps renewing a lease (a thread of its
own, ``liveness.Watchdog``): the lease ends FENCE seconds after the drain's
last sign of life, and before the time gc could take what the drain holds.
This guard, a small process in a session of its own started with the drain's
first batch, SIGKILLs every process of the drain's handlers (the Python
worker, an ``exec:`` program, and everything they started, found by the mark
in their environment: fence.py) the moment the lease runs out, and when the
drain ends or dies (EOF on its pipe), busy or idle: what a handler started
never outlives its drain, however the drain ends (handlers.md: What a handler
starts). It never looks for them by parent pid: a drain killed with -9 leaves
orphans whose parent is init.

The drain writes 8-byte ``>d`` records on the guard's stdin pipe: a lease as a
``time.monotonic()`` (one clock for every process of the host), or NaN when no
handler runs. The guard writes one byte to its report pipe each time it fires.

Run as a script (``python -I -S guard.py FD PID REPORT_FD TOKEN``), it imports
only the standard library and fence.py, so it starts in a few milliseconds.
"""

from __future__ import annotations

import math
import os
import signal
import struct
import sys
import threading
import time

TYPE_CHECKING = False  # not typing's: the guard process imports only what it runs
if TYPE_CHECKING:
    import subprocess

if __package__:
    from mq_cli.runners import fence
else:  # run as a script, with no mq on the path: its neighbour only
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import fence  # type: ignore[no-redef]

RECORD = struct.Struct(">d")
#: a lease is sent again once it has grown by this much (fewer writes, same bound)
RESEND = 0.2


def _kill_handlers(drain: int, token: str) -> None:
    fence.sweep(token, whole_token=True, spare=(drain,))


def serve(fd: int, drain: int, report: int, token: str) -> None:
    """The guard's loop: watch the lease on ``fd`` for ``drain``."""
    import select

    lease = math.nan
    pending = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        wait = None if math.isnan(lease) else max(lease - time.monotonic(), 0.0)
        if poller.poll(None if wait is None else math.ceil(wait * 1000)):
            chunk = os.read(fd, 4096)
            if not chunk:
                # The drain is gone (or closed us at its end): what its handlers
                # started goes with it, busy or idle, as on its every other end.
                _kill_handlers(drain, token)
                return
            pending += chunk
            whole = len(pending) - len(pending) % RECORD.size
            if whole:
                (lease,) = RECORD.unpack_from(pending, whole - RECORD.size)
                pending = pending[whole:]
            continue
        if poller.poll(0):
            continue  # a renewal (or a new batch's lease) came with the deadline: read it first
        if not math.isnan(lease) and time.monotonic() >= lease:
            _kill_handlers(drain, token)
            lease = math.nan
            try:
                os.write(report, b"!")
            except OSError:
                pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the drain's Ctrl-C is not ours
    serve(int(argv[0]), int(argv[1]), int(argv[2]), argv[3])
    return 0


class Guard:
    """The drain's side: start the guard, arm it for a batch, renew, disarm.

    ``renew`` runs on the watchdog's thread while the drain's main thread arms
    and disarms: a lock keeps a renewal from landing after a disarm.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd = -1
        self._rfd = -1
        self._lock = threading.Lock()
        self.armed = False
        self._sent = -math.inf

    def arm(self, lease: float) -> None:
        with self._lock:
            self._start()
            self.armed = True
            self._write(lease)

    def renew(self, lease: float) -> None:
        with self._lock:
            if self.armed and lease - self._sent >= RESEND:
                self._write(lease)

    def disarm(self) -> None:
        with self._lock:
            if self.armed:
                self.armed = False
                self._write(math.nan)

    def fired(self) -> bool:
        """Whether the guard stopped a handler since the last call."""
        if self._rfd < 0:
            return False
        try:
            return bool(os.read(self._rfd, 64))
        except BlockingIOError:
            return False

    def close(self) -> None:
        with self._lock:
            self.armed = False
            if self._proc is None:
                return
            os.close(self._wfd)  # EOF: it sweeps what the handlers left running, and exits
            os.close(self._rfd)
            self._wfd = self._rfd = -1
            import subprocess  # the drain's side only, as below

            from mq_cli.runners.process import wait_exited

            try:
                wait_exited(self._proc, 5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _write(self, lease: float) -> None:
        try:
            os.write(self._wfd, RECORD.pack(lease))
        except BlockingIOError:  # full: the guard is stopped too; it reads all later
            pass
        except BrokenPipeError:  # it died (OOM?): start another at the next arm
            self._forget()
            return
        self._sent = lease if not math.isnan(lease) else -math.inf

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        import subprocess  # the drain's side only: the guard process never needs it

        self._forget()
        lease_r, lease_w = os.pipe()
        report_r, report_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    __file__,
                    str(lease_r),
                    str(os.getpid()),
                    str(report_w),
                    fence.token(),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(lease_r, report_w),
                # Not in the drain's process group: stopping that must not stop us.
                start_new_session=True,
            )
        except BaseException:
            os.close(lease_w)
            os.close(report_r)
            raise
        finally:
            os.close(lease_r)
            os.close(report_w)
        os.set_blocking(lease_w, False)
        os.set_blocking(report_r, False)
        os.set_inheritable(lease_w, False)
        self._wfd, self._rfd = lease_w, report_r

    def _forget(self) -> None:
        for fd in (self._wfd, self._rfd):
            if fd >= 0:
                os.close(fd)
        self._wfd = self._rfd = -1
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
