"""Running a Python handler in a long-lived child process (:mod:`mq_cli.worker`).

A thread cannot be stopped and a signal cannot interrupt C code, so the only
timeout that always works is killing a process. One child serves many
messages (a message costs a pipe round trip, not an interpreter start); after
a timeout or a crash the next message gets a fresh child.
"""

from __future__ import annotations

import fcntl
import math
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable

from .errors import HandlerNotFound
from .handlers import MessageInfo, Outcome, Pacer, bounded
from .worker import OK, OK_FRAME, FrameBuffer, ProtocolError, encode_frame, write_all

CLOSE_GRACE = 5.0  # seconds a child gets to exit after its pipe closes, before SIGKILL
READ_CHUNK = 1 << 16
SUCCESS = Outcome(ok=True)


def _nothing() -> None:
    pass


def death(returncode: int) -> str:
    """'exit code N' or 'signal N (SIGNAME)' for a Popen returncode."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    return f"signal {-returncode} ({name})"


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


def _child_env() -> dict[str, str]:
    # The child must import what we import: a test's sys.path, a cron job's
    # venv started by absolute path, modules next to the config. Handing our
    # sys.path over (in our order) makes both interpreters agree.
    # The cwd comes first, as `python -m` would put it, even under PYTHONSAFEPATH.
    cwd = os.getcwd()
    seen: dict[str, None] = {cwd: None}
    for entry in sys.path:
        seen.setdefault(entry or cwd, None)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(seen)
    return env


class PythonRunner:
    """A Runner for ``package.module:callable`` handlers."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path = path
        self.fmt = fmt
        self._proc: subprocess.Popen[bytes] | None = None
        self._rfd = -1  # replies from the child
        self._wfd = -1  # messages to the child
        self._buffer = FrameBuffer()
        self._poller = select.poll()
        self._killed = False

    @property
    def pid(self) -> int | None:
        """The child's pid while one runs (for tests and operators' logs)."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> PythonRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        if self._proc is None:
            failed = self._spawn(Pacer(None, _nothing, 3600.0))
            if failed is not None:
                module = self.path.partition(":")[0]
                raise HandlerNotFound(
                    f"handler {self.path!r} could not be loaded ({failed.error}); "
                    f"run `python -c 'import {module}'` to see why"
                )

    def run(
        self,
        payload: bytes,
        info: MessageInfo,
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
    ) -> Outcome:
        pacer = Pacer(timeout, tick, tick_every)
        try:
            if self._proc is not None and self._proc.poll() is not None:
                # Died between messages (a handler's thread called os._exit...):
                # this message has not been sent yet, so just start over.
                self._discard()
            if self._proc is None:
                failed = self._spawn(pacer)
                if failed is not None:
                    return failed
            header: dict[str, object] = {
                "id": info.id,
                "queue": info.queue,
                "error_count": info.error_count,
                "created_at": info.created_at.isoformat(),
            }
            try:
                write_all(self._wfd, encode_frame(header, payload))
            except BrokenPipeError:
                return self._died()
            reply = self._receive(pacer)
        except BaseException:
            # An exception from tick() or a KeyboardInterrupt leaves the child
            # mid-message; a later run() would read this message's reply.
            self._discard()
            raise
        if reply is OK:
            return SUCCESS
        if isinstance(reply, Outcome):
            return reply
        if reply.get("ok") is True:
            return SUCCESS
        return Outcome(ok=False, error=_clean(reply.get("error")))

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        os.close(self._wfd)  # EOF: the worker's loop ends and it exits on its own
        self._wfd = -1
        try:
            proc.wait(timeout=CLOSE_GRACE)
        except subprocess.TimeoutExpired:  # a handler left a non-daemon thread running
            kill_group(proc.pid)
            proc.wait()
        self._forget()

    def kill(self) -> None:
        # Called from a signal handler while run() may be waiting: only send
        # the signal; run() sees the pipe close, reaps and reports.
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._killed = True
            kill_group(proc.pid)

    def _spawn(self, pacer: Pacer) -> Outcome | None:
        """Start a child and wait for its 'ready'; an Outcome if it died or timed out."""
        p2c_r, p2c_w = map(_above_stdio, os.pipe())
        c2p_r, c2p_w = map(_above_stdio, os.pipe())
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mq_cli.worker", self.path, self.fmt]
                + [str(p2c_r), str(c2p_w)],
                stdin=subprocess.DEVNULL,
                pass_fds=(p2c_r, c2p_w),
                env=_child_env(),
                # Its own process group, so a timeout also kills what the
                # handler started, and a Ctrl-C in a terminal reaches only
                # the drain, which decides.
                start_new_session=True,
            )
        except BaseException:
            os.close(p2c_w)
            os.close(c2p_r)
            raise
        finally:
            os.close(p2c_r)
            os.close(c2p_w)
        self._proc, self._wfd, self._rfd = proc, p2c_w, c2p_r
        self._buffer = FrameBuffer()
        self._poller = select.poll()
        self._poller.register(c2p_r, select.POLLIN)
        self._killed = False
        hello = self._receive(pacer)
        if isinstance(hello, Outcome):
            return hello
        if hello.get("ready") is not True:
            self._discard()
            raise HandlerNotFound(_clean(hello.get("error")) or f"handler {self.path!r}: no ready")
        return None

    def _receive(self, pacer: Pacer) -> dict[str, object] | Outcome:
        """The child's next frame, calling tick() meanwhile; an Outcome if it never comes."""
        buffer = self._buffer
        while True:
            if buffer.data == OK_FRAME:  # most replies: skip the JSON
                buffer.data.clear()
                return OK
            try:
                frame = buffer.next_frame()
            except ProtocolError as exc:
                self._discard()
                return Outcome(ok=False, error=f"handler process broke the protocol: {exc}")
            if frame is not None:
                return frame[0]
            if pacer.expired():
                self._discard()
                return Outcome(ok=False, error=pacer.timeout_error(), timed_out=True)
            if self._poller.poll(math.ceil(pacer.wait() * 1000)):
                chunk = os.read(self._rfd, READ_CHUNK)
                if not chunk:
                    return self._died()
                buffer.feed(chunk)

    def _died(self) -> Outcome:
        proc = self._proc
        assert proc is not None
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:  # closed our pipe but lives on: not usable
            kill_group(proc.pid)
            proc.wait()
        # Whatever the handler started dies with it, as on a timeout.
        kill_group(proc.pid)
        killed = self._killed
        self._forget()
        if killed:
            return Outcome(ok=False, error="killed: the drain was stopped")
        return Outcome(ok=False, error=f"handler process died: {death(proc.returncode)}")

    def _discard(self) -> None:
        """SIGKILL the child and everything it started, reap it, drop its pipes."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            kill_group(proc.pid)
        proc.wait()
        self._forget()

    def _forget(self) -> None:
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                os.close(fd)
        self._rfd = self._wfd = -1
        self._proc = None
        self._buffer = FrameBuffer()


def _clean(error: object) -> str | None:
    if error is None:
        return None
    # Lone surrogates survive JSON but not the database's UTF-8.
    return bounded(str(error).encode("utf-8", "replace").decode("utf-8"))
