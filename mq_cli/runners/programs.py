"""Running an ``exec:COMMAND ARGS...`` handler: one program run per message.

The command is split like a shell would split it but never given to one, so
neither the configuration nor a payload can inject shell syntax. The payload's
raw bytes go to the program's stdin; exit status 0 is success. The program
learns about its message from the environment: MQ_MESSAGE_ID, MQ_QUEUE,
MQ_ERROR_COUNT and MQ_CREATED_AT (ISO 8601 UTC), and carries the mark by
which a timeout or the guard finds all it started (fence.py).

Only the last TAIL_BYTES (:mod:`mq_cli.output`) of its stdout and stderr are
kept (for last_error), so a program that prints gigabytes costs no memory.
"""

from __future__ import annotations

import math
import os
import select
import subprocess
from collections.abc import Callable, Sequence

from mq_cli.core.models import iso
from mq_cli.runners import fence
from mq_cli.runners.handlers import (
    ERROR_LIMIT,
    MessageInfo,
    Outcome,
    Pacer,
    bounded,
    handler_environ,
)
from mq_cli.runners.output import Tail
from mq_cli.runners.paths import exec_argv
from mq_cli.runners.process import death, kill_group, kill_handler
from mq_cli.runners.runner import OneAtATime

READ_CHUNK = 1 << 16
# While the program's pipes are open we cannot tell it exited if something it
# started in the background still holds them; look this often.
EXIT_CHECK = 0.2


def _error(head: str, tail: str) -> str:
    # The head (why it failed) is short and always kept; the output's end fills the rest.
    if not tail:
        return head
    return f"{head}: {bounded(tail, ERROR_LIMIT - len(head) - 2)}"


class ExecRunner(OneAtATime):
    """A Runner for ``exec:`` handlers."""

    def __init__(self, path: str, hide: Sequence[str] = ()) -> None:
        self.path = path
        self.hide = tuple(hide)
        self._argv: list[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._mark = ""
        self._killed = False

    def __enter__(self) -> ExecRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self._argv = exec_argv(self.path)

    def run(
        self,
        payload: bytes,
        info: MessageInfo,
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
    ) -> Outcome:
        if self._argv is None:
            self.start()
        assert self._argv is not None
        pacer = Pacer(timeout, tick, tick_every)
        env = handler_environ(self.hide)
        env.update(
            MQ_MESSAGE_ID=str(info.id),
            MQ_QUEUE=info.queue,
            MQ_ERROR_COUNT=str(info.error_count),
            MQ_CREATED_AT=iso(info.created_at) or "",
        )
        mark = env[fence.VAR] = fence.next_mark()
        try:
            proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                # Its own process group: a timeout kills the program and
                # everything it started, and a terminal's Ctrl-C reaches only
                # the drain, which lets the running handler finish.
                start_new_session=True,
            )
        except OSError as exc:  # deleted or chmod-ed since start()
            return Outcome(ok=False, error=f"cannot run {self._argv[0]}: {exc.strerror}")
        self._proc, self._mark = proc, mark
        self._killed = False
        try:
            return self._communicate(proc, payload, pacer)
        finally:
            if proc.returncode is None:  # an exception (from tick) on the way out
                kill_handler(proc.pid, mark)
                proc.wait()
            elif self._killed:  # what it started outside its group goes too
                kill_handler(proc.pid, mark)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except BrokenPipeError:
                        pass
            self._proc = None

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            kill_handler(proc.pid, self._mark)
            proc.wait()

    def kill(self) -> None:
        # May run in a signal handler while run() waits: only send the signal.
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._killed = True
            kill_group(proc.pid)

    def _communicate(self, proc: subprocess.Popen[bytes], payload: bytes, pacer: Pacer) -> Outcome:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        tails = {proc.stdout.fileno(): Tail(), proc.stderr.fileno(): Tail()}
        poller = select.poll()
        for fd in tails:
            poller.register(fd, select.POLLIN)
        reading = set(tails)
        stdin_fd = proc.stdin.fileno()
        pending = memoryview(payload)
        if pending:
            # Non-blocking, so a program that never reads its stdin cannot
            # stall us (and our ticks) on a full pipe.
            os.set_blocking(stdin_fd, False)
            poller.register(stdin_fd, select.POLLOUT)
        else:
            proc.stdin.close()

        def stop_writing() -> None:
            poller.unregister(stdin_fd)
            proc.stdin.close()  # type: ignore[union-attr]

        while True:
            if pacer.expired():
                kill_handler(proc.pid, self._mark)
                proc.wait()
                return Outcome(
                    ok=False, error=_error(pacer.timeout_error(), self._tail(tails)), timed_out=True
                )
            if not reading and not pending:
                try:
                    proc.wait(timeout=pacer.wait())
                    break
                except subprocess.TimeoutExpired:
                    continue
            events = poller.poll(math.ceil(pacer.wait(cap=EXIT_CHECK) * 1000))
            for fd, event in events:
                if fd == stdin_fd:
                    if event & select.POLLOUT:
                        try:
                            pending = pending[os.write(stdin_fd, pending[:READ_CHUNK]) :]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:  # it stopped reading; its exit status decides
                            pending = pending[:0]
                    else:  # POLLERR: the reading end is gone
                        pending = pending[:0]
                    if not pending:
                        stop_writing()
                    continue
                chunk = os.read(fd, READ_CHUNK)
                if chunk:
                    tails[fd].add(chunk)
                else:
                    poller.unregister(fd)
                    reading.discard(fd)
            if not events and proc.poll() is not None:
                break  # exited; whatever still holds its pipes is not our business
        return self._result(proc.returncode, tails)

    def _tail(self, tails: dict[int, Tail]) -> str:
        stdout, stderr = tails.values()
        return stderr.text() or stdout.text()

    def _result(self, returncode: int, tails: dict[int, Tail]) -> Outcome:
        if returncode == 0:
            return Outcome(ok=True)
        if self._killed:
            return Outcome(ok=False, error="killed: the drain was stopped")
        if returncode > 0:
            head = f"exit status {returncode}"
        else:
            head = "killed by " + death(returncode)
        return Outcome(ok=False, error=_error(head, self._tail(tails)))
