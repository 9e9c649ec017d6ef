"""The child process that runs a Python handler: ``python -m mq_cli.runners.child PATH FORMAT RFD WFD CFD``.

It lives as long as the drain's runner (one import, one class instance, for
many messages) and talks to it over dedicated pipes, so the handler's own
prints on stdout/stderr never corrupt the protocol.

Frames on RFD and WFD: ``>IQ`` (header length, body length), a JSON header,
raw body bytes; nothing the parent reads can execute code.

- parent -> child, once: ``{"load": true}`` when it has a message for it (or
  will wait for one: ``--wait``); only then does the child import the handler,
  so a child that a drain with nothing to run ends unused never imports it
- child -> parent, once: ``{"ready": true}`` or ``{"ready": false, "error": ...}``
- then, per message, frames with no header and a fixed binary start (a JSON
  header costs more than a trivial handler):

  - parent -> child: :data:`MESSAGE` (number ``n`` = 1, 2, ..., id,
    error_count, created_at in microseconds since the epoch, ``until``: a
    ``time.monotonic()`` after which it must not start, NaN for none, length
    of the queue name), the queue name, the payload;
  - child -> parent, in order: :data:`REPLY` (``n``, DONE/FAILED/SKIPPED,
    ``t``: the monotonic time it ended, ``s``: the handler's seconds), then for
    FAILED the error text (UTF-8).

The parent sends messages ahead, so the child starts the next one the moment
the last one ends (the round trip over the pipes is hidden behind the
parent's database work). To take back messages it sent, the parent writes
8-byte ``>q`` numbers on CFD: the child skips every message numbered up to
the highest it has read there, unless it has started it already. CFD carries
fixed-size records, each written at once, so a signal handler in the parent
may write one while the main loop is between writes.

The worker exits when the drain closes its pipe, and dies at once (with what
its handler started) if the drain dies while a handler runs.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import struct
import sys
import threading
import time
import types
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial

from mq_cli.core.errors import HandlerNotFound
from mq_cli.core.payloads import decode
from mq_cli.runners.handlers import MessageInfo, _set_current, bounded
from mq_cli.runners.paths import load

PREFIX = struct.Struct(">IQ")
SKIP = struct.Struct(">q")
SKIP_ALL = (1 << 62) - 1  # on CFD: start nothing more, ever
MESSAGE = struct.Struct(">QqqqdH")  # n, id, error_count, created_at µs, until, len(queue)
REPLY = struct.Struct(">QBdd")  # n, kind, t, s
DONE, FAILED, SKIPPED = 0, 1, 2
# The prefix and the fixed part of a frame in one pack (big-endian: no padding between)
_MESSAGE_FRAME = struct.Struct(PREFIX.format + MESSAGE.format[1:])
_REPLY_FRAME = struct.Struct(PREFIX.format + REPLY.format[1:])
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ONE_US = timedelta(microseconds=1)
MAX_HEADER = 1 << 20
READ_CHUNK = 1 << 16
MAX_READ = 1 << 20
LOAD: dict[str, object] = {"load": True}  # the drain's go: import the handler now


class ProtocolError(Exception):
    """The other side sent something that is not a frame."""


# One encoder for all frames: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode_frame(header: dict[str, object], body: bytes = b"") -> bytes:
    head = _ENCODER.encode(header).encode()
    return PREFIX.pack(len(head), len(body)) + head + body


def encode_message(number: int, info: MessageInfo, until: float | None, payload: bytes) -> bytes:
    queue = info.queue.encode()
    created = (info.created_at - EPOCH) // ONE_US
    size = MESSAGE.size + len(queue) + len(payload)
    until = math.nan if until is None else until
    head = _MESSAGE_FRAME.pack(
        0, size, number, info.id, info.error_count, created, until, len(queue)
    )
    return head + queue + payload


def decode_message(body: bytes) -> tuple[int, float | None, bytes]:
    """(number, until, payload) of a MESSAGE frame's body; :func:`message_info` for the rest."""
    number, _, _, _, until, length = MESSAGE.unpack_from(body)
    return number, None if until != until else until, body[MESSAGE.size + length :]  # NaN: none


def message_info(body: bytes) -> MessageInfo:
    """The MessageInfo of a MESSAGE frame's body (built only when a handler asks for it)."""
    _, ident, errors, created, _, length = MESSAGE.unpack_from(body)
    queue = body[MESSAGE.size : MESSAGE.size + length].decode()
    return MessageInfo(ident, queue, errors, EPOCH + created * ONE_US)


def encode_reply(number: int, kind: int, ended: float, seconds: float, error: str = "") -> bytes:
    if not error:
        return _REPLY_FRAME.pack(0, REPLY.size, number, kind, ended, seconds)
    body = REPLY.pack(number, kind, ended, seconds) + error.encode("utf-8", "replace")
    return PREFIX.pack(0, len(body)) + body


def decode_reply(
    frame: tuple[dict[str, object] | None, bytes], number: int
) -> tuple[int, float, float, str] | str:
    """(kind, ended, seconds, error) from the reply to message ``number``; else what is wrong."""
    header, body = frame
    if header is not None or len(body) < REPLY.size:
        return f"not a reply: {header!r}"
    got, kind, ended, seconds = REPLY.unpack_from(body)
    if got != number:
        return f"reply to message {got} when {number} was running"
    return kind, ended, seconds, body[REPLY.size :].decode("utf-8", "replace")


class FrameBuffer:
    """Bytes received so far; frames come out whole however the reads were cut."""

    def __init__(self) -> None:
        self.data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.data += chunk

    def missing(self) -> int:
        """Bytes still to come for the frame being received (0 if unknown yet)."""
        if len(self.data) < PREFIX.size:
            return 0
        head_len, body_len = PREFIX.unpack_from(self.data)
        return PREFIX.size + head_len + body_len - len(self.data)

    def next_reply(self, number: int) -> tuple[int, float, float, str] | None:
        """(kind, ended, seconds, "") if the next frame is a whole reply to message ``number``
        without an error text, taken from the buffer; else None, the buffer untouched.
        The common reply, without a frame tuple, a copy or decode_reply's checks."""
        data = self.data
        if len(data) < _REPLY_FRAME.size:
            return None
        head_len, body_len, got, kind, ended, seconds = _REPLY_FRAME.unpack_from(data)
        if head_len or body_len != REPLY.size or got != number:
            return None
        del data[: _REPLY_FRAME.size]
        return kind, ended, seconds, ""

    def has_frame(self) -> bool:
        """Whether a whole frame is waiting (next_frame would return it)."""
        return len(self.data) >= PREFIX.size and self.missing() <= 0

    def next_frame(self) -> tuple[dict[str, object] | None, bytes] | None:
        """The next whole frame: (JSON header, body), or (None, body) for a binary one."""
        if len(self.data) < PREFIX.size:
            return None
        head_len, body_len = PREFIX.unpack_from(self.data)
        if head_len > MAX_HEADER:
            raise ProtocolError(f"frame header of {head_len} bytes")
        end = PREFIX.size + head_len + body_len
        if len(self.data) < end:
            return None
        if not head_len:
            body = bytes(self.data[PREFIX.size : end])
            del self.data[:end]
            return None, body
        try:
            header = json.loads(self.data[PREFIX.size : PREFIX.size + head_len])
        except ValueError as exc:
            raise ProtocolError(f"frame header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise ProtocolError("frame header is not a JSON object")
        body = bytes(self.data[PREFIX.size + head_len : end])
        del self.data[:end]
        return header, body


def write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)  # a reply is small: whole at the first write (a pipe)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _read_frame(fd: int, buffer: FrameBuffer) -> tuple[dict[str, object] | None, bytes] | None:
    """The next frame, or None when the parent closed the pipe (or died)."""
    while True:
        frame = buffer.next_frame()
        if frame is not None:
            return frame
        # One read per small message (each syscall is a visible share of a
        # trivial handler's cost); bigger reads for big payloads, bounded so
        # no read allocates a buffer the size of the whole payload.
        chunk = os.read(fd, min(max(buffer.missing(), READ_CHUNK), MAX_READ))
        if not chunk:
            return None
        buffer.feed(chunk)


def _describe(exc: BaseException) -> str:
    try:
        # Skip our own frame: the operator wants the handler's lines only.
        import traceback  # a failure's cost, not every child's start

        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # an exception whose __str__ fails must not kill the worker
        text = f"{type(exc).__name__} (its message could not be formatted)"
    return bounded(text.rstrip())


_handler_running = False


def _hung_up(poller: select.poll, timeout: int | None) -> bool:
    """Whether the drain's end of our message pipe is closed: it exited or died."""
    return any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(timeout))


def _watch_drain(fd: int) -> None:
    """Kill this worker (and what its handler started) as soon as the drain dies.

    A handler left running after its drain was killed -9 would still be
    working on a message that nobody heartbeats any more; once that message
    is requeued as stalled, another drain would run it at the same time.
    Between messages the main loop sees the EOF itself and exits cleanly.
    """
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: poll still reports POLLHUP/POLLERR
    while not _hung_up(poller, None):
        pass
    if _handler_running:
        # Our own group only when we lead it (start_new_session in the runner).
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _may_start(drain: select.poll, rfd: int, cfd: int, skip: int) -> int:
    """Before a message starts: exit if the drain is gone, else the highest message
    number taken back so far. One poll(2) looks at both pipes.

    Marked running first, then the drain looked at: if it dies after the look,
    the watch thread sees a handler running and kills it. Messages sent ahead
    stay readable in the pipe after the drain died; none may start then (nobody
    would heartbeat it or record its result)."""
    global _handler_running
    _handler_running = True
    for fd, event in drain.poll(0):
        if fd == rfd and event & (select.POLLHUP | select.POLLERR):
            os._exit(0)
        if fd == cfd:
            skip = _skip_upto(cfd, skip)
    return skip


def _run_one(
    handler: object, fmt: str, info: MessageInfo | Callable[[], MessageInfo], body: bytes
) -> str | None:
    """Run the handler on one message (marked running: _may_start): None if it
    succeeded, else the error."""
    global _handler_running
    try:
        value = decode(body, fmt)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        _handler_running = False
        return f"payload is not valid {fmt}: {exc}"
    _set_current(info)
    try:
        result = handler(value)  # type: ignore[operator]
        if isinstance(result, types.CoroutineType):  # what inspect.iscoroutine() checks
            # An `async def` handler: not awaiting it would count as a success
            # while its work never ran.
            import asyncio

            result = asyncio.run(result)
    except BaseException as exc:  # even SystemExit: it fails the message, not the worker
        return _describe(exc)
    finally:
        _handler_running = False
        _set_current(None)
        # Block-buffered prints (stdout is a pipe under cron) would otherwise
        # show up long after the message, or never if we are killed.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
    if result is False:
        return "handler returned False"
    return None


def _no_op(signum: int, frame: object) -> None:
    pass


def _skip_upto(cfd: int, current: int) -> int:
    """The highest message number the parent took back so far (non-blocking)."""
    while True:
        try:
            data = os.read(cfd, 4096)
        except BlockingIOError:
            return current
        if not data:  # the parent closed it: nothing more will come
            return current
        for (number,) in SKIP.iter_unpack(data[: len(data) - len(data) % SKIP.size]):
            current = max(current, number)


def _serve(
    handler: object, fmt: str, rfd: int, wfd: int, cfd: int, buffer: FrameBuffer | None = None
) -> None:
    global _handler_running
    buffer = buffer or FrameBuffer()  # may hold messages sent ahead, read with an earlier one
    drain = select.poll()
    drain.register(rfd, 0)  # no events asked: poll still reports POLLHUP/POLLERR
    drain.register(cfd, select.POLLIN)
    skip = 0
    while True:
        frame = _read_frame(rfd, buffer)
        if frame is None:  # the drain closed the pipe or died: nothing more to do
            return
        header, body = frame
        if header is not None:
            raise ProtocolError(f"expected a message, got {header!r}")
        number, until, payload = decode_message(body)
        skip = _may_start(drain, rfd, cfd, skip)
        now = time.monotonic()
        if number <= skip or (until is not None and now >= until):
            _handler_running = False
            write_all(wfd, encode_reply(number, SKIPPED, now, 0.0))
            continue
        error = _run_one(handler, fmt, partial(message_info, body), payload)
        ended = time.monotonic()
        kind = DONE if error is None else FAILED
        write_all(wfd, encode_reply(number, kind, ended, ended - now, error or ""))


def main(argv: list[str]) -> int:
    path, fmt, rfd, wfd, cfd = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    os.set_blocking(cfd, False)
    # The drain decides what a signal means (the first lets the handler finish),
    # so ours must not kill us. A no-op handler rather than SIG_IGN because
    # ignored signals survive exec: programs the handler starts would ignore
    # SIGTERM too.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _no_op)
    buffer = FrameBuffer()
    go = _read_frame(rfd, buffer)
    if go is None:  # the drain ended with nothing to run: the handler was never imported
        return 0
    if go[0] != LOAD:
        raise ProtocolError(f"expected {LOAD!r}, got {go[0]!r}")
    try:
        handler = load(path)
    except HandlerNotFound as exc:
        write_all(wfd, encode_frame({"ready": False, "error": str(exc)}))
        return 0
    except Exception as exc:
        message = f"handler {path!r}: loading failed: {type(exc).__name__}: {exc}"
        write_all(wfd, encode_frame({"ready": False, "error": message}))
        return 0
    threading.Thread(target=_watch_drain, args=(rfd,), name="mq-watch-drain", daemon=True).start()
    try:
        write_all(wfd, encode_frame({"ready": True}))
        _serve(handler, fmt, rfd, wfd, cfd, buffer)
    except BrokenPipeError:  # the drain died while we ran a handler
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
