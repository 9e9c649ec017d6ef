"""The Python handler's child as the drain holds it: the process, its four pipes,
the pidfd that tells its exit, the fence mark all it starts inherits, and what
its handler prints. :class:`mq_cli.runners.python.PythonRunner` speaks the
message protocol over these; this module starts, reads and ends the process.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Sequence

from mq_cli.core.errors import HandlerNotFound
from mq_cli.runners import fence
from mq_cli.runners.child import LOAD, FrameBuffer, encode_frame
from mq_cli.runners.handlers import handler_environ, storable
from mq_cli.runners.output import Tail
from mq_cli.runners.process import _above_stdio, _pidfd, kill_group, kill_handler, wait_exited

CLOSE_GRACE = 5.0  # seconds a child gets to exit after its pipe closes, before SIGKILL
READ_CHUNK = 1 << 16


def check_hello(header: dict[str, object] | None, path: str) -> None:
    """The child's first frame: ``{"ready": true}``, else HandlerNotFound with its reason."""
    hello = header or {}
    if hello.get("ready") is not True:
        raise HandlerNotFound(storable(hello.get("error")) or f"handler {path!r}: no ready")


def not_loaded(path: str, error: str | None) -> HandlerNotFound:
    module = path.partition(":")[0]
    return HandlerNotFound(
        f"handler {path!r} could not be loaded ({error}); "
        f"run `python -c 'import {module}'` to see why"
    )


def _child_path() -> list[str]:
    """The worker's sys.path: ours (a test's, a cron job's venv started by absolute
    path), with the current directory last.

    Handlers next to where mq runs stay importable, but a `json.py` planted in a
    directory others can write must not shadow the standard library, site-packages
    or mq itself, as it would first on the path (where `python -m` puts it).
    """
    cwd = os.getcwd()
    entries = [entry for entry in sys.path if entry not in ("", cwd)]
    return list(dict.fromkeys([*entries, cwd]))


def _worker_argv(path: str, fmt: str, fds: Sequence[int]) -> list[str]:
    # -I: nothing from the current directory, PYTHONPATH or the user site goes
    # before the standard library; the path we hand over is set before any
    # import of mq's (PYTHONPATH would also come before the standard library).
    boot = (
        f"import sys; sys.path[:] = {_child_path()!r}; "
        "from mq_cli.runners.child import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-I", "-c", boot, path, fmt, *map(str, fds)]


class Worker:
    """One started child. ``rfd``: its replies; ``wfd``: messages to it and ``cfd``:
    take-backs to it (both non-blocking); ``ofd``: what the handler prints
    (non-blocking); ``pidfd``: readable once it exited (-1: not on this system).
    ``poller`` watches them all; a descriptor is -1 once closed."""

    def __init__(self, path: str, fmt: str, hide: Sequence[str], output: Tail) -> None:
        p2c_r, p2c_w = map(_above_stdio, os.pipe())
        c2p_r, c2p_w = map(_above_stdio, os.pipe())
        ctl_r, ctl_w = map(_above_stdio, os.pipe())
        out_r, out_w = map(_above_stdio, os.pipe())
        theirs = (p2c_r, c2p_w, ctl_r)
        env = handler_environ(hide)
        self.mark = env[fence.VAR] = fence.next_mark()
        try:
            self.proc = subprocess.Popen(
                _worker_argv(path, fmt, theirs),
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=theirs,
                env=env,
                # Its own process group, so a timeout also kills what the
                # handler started, and a Ctrl-C in a terminal reaches only
                # the drain, which decides.
                start_new_session=True,
            )
        except BaseException:
            for fd in (p2c_w, c2p_r, ctl_w, out_r):
                os.close(fd)
            raise
        finally:
            for fd in (*theirs, out_w):
                os.close(fd)
        for fd in (p2c_w, ctl_w, out_r, c2p_r):
            os.set_blocking(fd, False)
        self.wfd, self.rfd, self.cfd, self.ofd = p2c_w, c2p_r, ctl_w, out_r
        self.pidfd = _pidfd(self.proc.pid)
        self.loading = False  # told to import the handler (load())
        self.output = output
        self.output_poller = select.poll()  # has_output(): a look without a failed read
        self.output_poller.register(out_r, select.POLLIN)
        self.poller = select.poll()
        self.poller.register(c2p_r, select.POLLIN)
        self.poller.register(p2c_w, 0)
        self.poller.register(out_r, select.POLLIN)
        if self.pidfd >= 0:
            self.poller.register(self.pidfd, select.POLLIN)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def load(self) -> None:
        """Tell the child to import the handler (once): it waits for this, so a child
        started early and never needed runs none of the handler's code."""
        if not self.loading:
            self.loading = True
            try:
                os.write(self.wfd, encode_frame(LOAD))  # the first bytes: the pipe takes them
            except BrokenPipeError:  # it died: the wait for its "ready" says how
                pass

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def read_output_waiting(self) -> None:
        """read_output() if anything is there (a poll costs a third of a read that fails)."""
        if self.ofd >= 0 and self.output_poller.poll(0):
            self.read_output()

    def read_output(self) -> None:
        """Take in what the handler printed so far (its pipe never blocks us)."""
        try:
            while chunk := os.read(self.ofd, READ_CHUNK):
                self.output.add(chunk)
        except BlockingIOError:
            return
        # EOF: the child and all it started closed it; nothing more will come.
        self.poller.unregister(self.ofd)
        os.close(self.ofd)
        self.ofd = -1

    def read_rest(self, buffer: FrameBuffer) -> None:
        """Whatever the (dead) child wrote that we have not read yet."""
        while True:
            try:
                chunk = os.read(self.rfd, READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                break
            buffer.feed(chunk)
        if self.ofd >= 0:
            self.read_output()

    def reap(self) -> int:
        """After its pipe closed: wait for the child (killing one that lives on, not
        usable), sweep all it started, close the pipes; its returncode."""
        try:
            wait_exited(self.proc, 1.0, self.pidfd)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()
        # Whatever the handler started dies with it, as on a timeout.
        kill_handler(self.proc.pid, self.mark)
        self.close_fds()
        return self.proc.returncode

    def discard(self) -> None:
        """SIGKILL the child and everything it started, reap it, drop its pipes."""
        if self.proc.returncode is None:
            kill_group(self.proc.pid)
        self.proc.wait()
        kill_handler(self.proc.pid, self.mark)
        self.close_fds()

    def close(self) -> None:
        """End it gently: EOF on its messages, and its loop ends and it exits."""
        os.close(self.wfd)
        self.wfd = -1
        try:
            wait_exited(self.proc, CLOSE_GRACE, self.pidfd)
        except subprocess.TimeoutExpired:  # a handler left a non-daemon thread running
            kill_handler(self.proc.pid, self.mark)
            self.proc.wait()
        self.close_fds()

    def close_fds(self) -> None:
        if self.ofd >= 0:
            self.read_output()
        self.output.to_stderr()
        # cfd first: a signal handler (PythonRunner.stop) may write to it at any moment.
        fds = (self.cfd, self.rfd, self.wfd, self.ofd, self.pidfd)
        self.cfd = self.rfd = self.wfd = self.ofd = self.pidfd = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)
