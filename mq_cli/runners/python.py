"""Running a Python handler in a long-lived child process (:mod:`mq_cli.runners.child`).

A thread cannot be stopped and a signal cannot interrupt C code, so the only
timeout that always works is killing a process. One child serves many
messages, not an interpreter start each; after a timeout or a crash the next
message gets a fresh child.

Messages are sent ahead (up to WINDOW of them): the child starts the next
one as soon as the last one ends, while the drain records the last result
in the database, so the pipe round trip costs no throughput. What was sent
but has not started can be taken back (a stop, a message no longer held).

What the handler prints (stdout and stderr) comes back on a pipe of its own
and goes to the drain's stderr, cut to its end after each message as an
``exec:`` handler's output is: never onto the drain's stdout, which belongs to
``mq drain --json``, and never gigabytes into a cron mail.
"""

from __future__ import annotations

import bisect
import math
import os
import select
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence

from mq_cli.core.errors import HandlerNotFound
from mq_cli.runners.child import (
    FAILED,
    SKIP,
    SKIP_ALL,
    SKIPPED,
    FrameBuffer,
    ProtocolError,
    decode_reply,
    encode_message,
)
from mq_cli.runners.handlers import NOT_STARTED, Job, MessageInfo, Outcome, Pacer, storable
from mq_cli.runners.output import Tail
from mq_cli.runners.process import death, kill_group
from mq_cli.runners.worker import READ_CHUNK, Worker, check_hello, not_loaded

WINDOW = 64  # messages sent ahead of the running one ...
WINDOW_BYTES = 1 << 20  # ... holding at most this many payload bytes (but always one)
EXIT_CHECK = 0.2  # seconds between looks at the child, where no pidfd can tell us at once
# A fresh child's start (Python, the handler's imports) is no message's time: on a
READY_WITHIN = 60.0  # loaded machine it can take longer than a 1 s timeout
AHEAD_WITHIN = 0.02  # ending_soon(): the jobs left end about this soon


class _Sent:
    """A message in the pipe to the child, or running there."""

    __slots__ = ("number", "index", "sent_at", "size")

    def __init__(self, number: int, index: int, sent_at: float, size: int) -> None:
        self.number, self.index, self.sent_at, self.size = number, index, sent_at, size


class PythonRunner:
    """A Runner for ``package.module:callable`` handlers."""

    def __init__(self, path: str, fmt: str, hide: Sequence[str] = ()) -> None:
        self.path = path
        self.fmt = fmt
        self.hide = tuple(hide)
        self._child: Worker | None = None  # the child running now, with its pipes
        self._output = Tail()  # what its handler printed, not yet passed on
        self._out = bytearray()  # frames not yet written to the child
        self._buffer = FrameBuffer()
        self._number = 0  # the last message number sent to this child
        self._taken = 0  # the highest number taken back from this child
        self._stopped = False
        self._killed = False
        self._ready_once = False  # a child of ours got ready at least once
        self._greeted = False  # the child running now said it is ready
        self._pace: float | None = None  # a handler's recent seconds (slow ones weigh long)

    @property
    def pid(self) -> int | None:
        """The child's pid while one runs (for tests and operators' logs)."""
        return self._child.pid if self._child is not None else None

    def __enter__(self) -> PythonRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the child now (run_many would start it with the first message)."""
        self._get_ready(Pacer(None, lambda: None, 3600.0))

    def launch(self) -> None:
        """Start the child without waiting: start() or the first message has it import
        the handler; close() ends it unused, the handler never imported."""
        if self._child is None:
            self._launch()

    def _get_ready(self, pacer: Pacer) -> Outcome | None:
        """A child ready for a message: the one launched, the one running, or a new one
        (none yet, or it died between messages: a handler's thread called os._exit...)."""
        if self._child is not None and self._greeted:
            if not self._child.exited():
                return None
            self._discard()
        (self._child or self._launch()).load()  # the handler's import starts now
        failed = self._ready(pacer)
        if failed is None:
            self._ready_once = True
        elif failed.started and not self._ready_once:
            # A child that never got ready is the handler's fault (HandlerNotFound, exit 2;
            # the batch goes back untouched), unless we killed it (NOT_STARTED: a stop).
            raise not_loaded(self.path, failed.error)
        return failed

    def run(
        self,
        payload: bytes,
        info: MessageInfo,
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
    ) -> Outcome:
        for _, outcome in self.run_many(
            [(payload, info)], lambda _: True, timeout, tick, tick_every
        ):
            return outcome
        raise AssertionError("run_many yields every job")

    def run_many(
        self,
        jobs: Sequence[Job],
        admit: Callable[[int], bool],
        timeout: float | None,
        tick: Callable[[], None],
        tick_every: float,
        not_after: Callable[[], float | None] | None = None,
        ending_soon: Callable[[], None] | None = None,
        more: Callable[[], int] | None = None,
    ) -> Generator[tuple[int, Outcome], None, None]:
        if self._taken >= SKIP_ALL:  # stopped earlier: this child would start nothing
            self._discard()
        self._stopped = False
        todo: deque[int] = deque(range(len(jobs)))  # not sent (or taken back), in order
        sent: deque[_Sent] = deque()
        pacer = Pacer(None, tick, tick_every)
        ended = 0.0  # when the child ended its last message (time.monotonic)

        def until() -> float:
            limit = not_after() if not_after is not None else None
            return math.inf if limit is None else limit

        def runnable(index: int, limit: float = -math.inf) -> float:
            # When it must not start (``limit`` while ahead, else a fresh until()), or 0.0
            # if it may not be sent now. admit() first: it may renew until() (a heartbeat).
            if self._stopped or not admit(index):
                return 0.0
            now = time.monotonic()
            fresh = limit if now < limit else until()
            return fresh if now < fresh else 0.0

        def take_back_unwanted() -> None:
            # After a tick (a heartbeat may have found messages gone) or a stop.
            if self._number > self._taken and not all(runnable(s.index) for s in sent):
                self._take_back(self._number)

        told = False  # ending_soon() was called for the jobs so far
        try:
            while True:
                if not todo and not sent:
                    known = len(jobs)
                    todo.extend(range(known, known + (more() if more is not None else 0)))
                    if not todo:
                        break
                    told = False
                if len(sent) <= WINDOW // 4:  # one write, one wake-up of the child per 48
                    if not told and ending_soon is not None and self._pace is not None:
                        # The jobs left end within AHEAD_WITHIN at the handlers' recent pace:
                        # told first, so the next claim runs while this refill is written.
                        told = (len(todo) + len(sent)) * self._pace <= AHEAD_WITHIN
                        if told:
                            ending_soon()
                    limit = until()  # once per refill (runnable() looks again past it)
                    in_flight = sum(s.size for s in sent)
                    while todo and len(sent) < WINDOW:
                        if sent and in_flight >= WINDOW_BYTES:
                            break
                        index = todo.popleft()
                        limit = runnable(index, limit)
                        if not limit:
                            yield index, NOT_STARTED
                            continue
                        if not sent and (failed := self._get_ready(pacer)):
                            yield index, failed
                            continue
                        sent.append(self._send(jobs[index], index, limit))
                        in_flight += sent[-1].size
                    self._flush()
                    if not sent:
                        continue
                head = sent[0]
                quick = self._buffer.next_reply(head.number)  # read already: most are
                if quick is not None:
                    reply: tuple[int, float, float, str] | str | Outcome = quick
                else:
                    deadline = max(ended, head.sent_at) + timeout if timeout else None
                    frame = self._next_reply(pacer, deadline, timeout, take_back_unwanted)
                    reply = (
                        frame if isinstance(frame, Outcome) else decode_reply(frame, head.number)
                    )
                self._output.to_stderr()
                if isinstance(reply, str):
                    self._discard()
                    reply = Outcome(ok=False, error=f"handler process broke the protocol: {reply}")
                if isinstance(reply, Outcome):  # the child is gone: nothing else started
                    sent.popleft()
                    for other in sent:
                        bisect.insort(todo, other.index)
                    sent.clear()
                    yield head.index, reply
                    continue
                sent.popleft()
                kind, ended, seconds, error = reply
                self._pace = max(seconds, (self._pace or 0.0) * 0.9)
                if kind == SKIPPED:
                    if runnable(head.index):  # taken back with others: send it again
                        bisect.insort(todo, head.index)
                    else:
                        yield head.index, NOT_STARTED
                elif kind == FAILED:
                    yield head.index, Outcome(ok=False, error=storable(error), seconds=seconds)
                else:
                    yield head.index, Outcome(ok=True, seconds=seconds)
        except BaseException:
            # An exception from tick(), from the caller between two results, or the
            # caller abandoning us (GeneratorExit): a handler may be running on a
            # message the caller is about to give back. Kill it first.
            if sent:
                self._discard()
            raise

    def stop(self) -> None:
        # May run in a signal handler: a flag and one atomic write, nothing else.
        self._stopped = True
        self._take_back(SKIP_ALL)

    def close(self) -> None:
        if self._child is not None and not self._greeted:
            self._discard()  # launched and never needed: no message of ours in it
        elif self._child is not None:
            self._child.close()
            self._forget()

    def kill(self) -> None:
        # Called from a signal handler while run() may be waiting: only send
        # the signal; run() sees the pipe close, reaps and reports.
        child = self._child
        if child is not None and child.proc.returncode is None:
            self._killed = True
            kill_group(child.pid)

    def _send(self, job: Job, index: int, not_after: float) -> _Sent:
        payload, info = job
        self._number += 1
        until = None if not_after == math.inf else not_after
        self._out += encode_message(self._number, info, until, payload)
        return _Sent(self._number, index, time.monotonic(), len(payload))

    def _flush(self) -> None:
        """Write what the pipe takes now; the rest waits for POLLOUT in _next_reply."""
        child = self._child
        if not self._out or child is None:
            return
        try:
            while self._out:
                del self._out[: os.write(child.wfd, self._out)]
        except BlockingIOError:
            pass
        except BrokenPipeError:  # the child died: its EOF tells the rest
            self._out.clear()
        child.poller.modify(child.wfd, select.POLLOUT if self._out else 0)

    def _take_back(self, number: int) -> None:
        # May run in a signal handler (stop): the child's take-back pipe read once.
        child = self._child
        cfd = child.cfd if child is not None else -1
        if cfd < 0 or number <= self._taken:
            return
        self._taken = number
        try:
            os.write(cfd, SKIP.pack(number))
        except (BlockingIOError, BrokenPipeError):
            # Full: the child has not read 8,000 earlier take-backs, so it is not
            # between messages; or it is gone. Either way it starts nothing new.
            pass

    def _next_reply(
        self,
        pacer: Pacer,
        deadline: float | None,
        timeout: float | None,
        after_tick: Callable[[], None],
    ) -> tuple[dict[str, object] | None, bytes] | Outcome:
        """The child's next frame, calling tick() meanwhile; an Outcome if it never comes."""
        buffer = self._buffer
        child = self._child
        assert child is not None
        while True:
            try:
                frame = buffer.next_frame()
            except ProtocolError as exc:
                self._discard()
                return Outcome(ok=False, error=f"handler process broke the protocol: {exc}")
            if frame is not None:
                return frame
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._discard()
                return Outcome(ok=False, error=f"timed out after {timeout:g}s", timed_out=True)
            ticks = pacer.ticks
            wait = pacer.wait(None if deadline is None else deadline - now)
            if pacer.ticks != ticks:
                after_tick()
            if child.pidfd < 0:
                wait = min(wait, EXIT_CHECK)
            exited = False
            for fd, event in child.poller.poll(math.ceil(wait * 1000)):
                if fd == child.rfd:
                    try:
                        chunk = os.read(child.rfd, READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        return self._died()
                    buffer.feed(chunk)
                    # The child flushes what a handler printed before its reply, so
                    # reading it now puts it before every reply in this chunk.
                    child.read_output_waiting()
                elif fd == child.pidfd:
                    exited = True
                elif fd == child.ofd:
                    child.read_output()
                elif event & select.POLLOUT:
                    self._flush()
                else:  # POLLERR: the child closed its end (died)
                    self._out.clear()
                    child.poller.modify(child.wfd, 0)
            if exited or (child.pidfd < 0 and child.exited()):
                # Its death, not the pipe's EOF, is what counts: a process the handler
                # forked may hold the pipe open for as long as it lives. What the child
                # wrote before it died still counts (a reply, then an exit).
                child.read_rest(buffer)
                if not buffer.has_frame():
                    return self._died()

    def _launch(self) -> Worker:
        self._forget()
        self._child = Worker(self.path, self.fmt, self.hide, self._output)
        self._killed = self._greeted = False
        return self._child

    def _ready(self, pacer: Pacer) -> Outcome | None:
        """Wait for the child's 'ready'; an Outcome if it died or never got ready."""
        frame = self._next_reply(pacer, time.monotonic() + READY_WITHIN, READY_WITHIN, lambda: None)
        if isinstance(frame, Outcome) and self._killed:
            return NOT_STARTED  # killed by us (a stop, a lost session) before it could start one
        if isinstance(frame, Outcome):
            late = f"handler process not ready within {READY_WITHIN:g}s"
            return Outcome(ok=False, error=late) if frame.timed_out else frame
        try:
            check_hello(frame[0], self.path)
        except HandlerNotFound:
            self._discard()
            raise
        self._greeted = True
        return None

    def _died(self) -> Outcome:
        assert self._child is not None
        returncode = self._child.reap()
        killed = self._killed
        self._forget()
        if killed:
            return Outcome(ok=False, error="killed: the drain was stopped")
        return Outcome(ok=False, error=f"handler process died: {death(returncode)}")

    def _discard(self) -> None:
        """SIGKILL the child and everything it started, reap it, drop its pipes."""
        if self._child is not None:
            self._child.discard()
            self._forget()

    def _forget(self) -> None:
        self._child = None
        self._buffer = FrameBuffer()
        self._out = bytearray()
        self._number = self._taken = 0
