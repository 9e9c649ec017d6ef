"""The child process that runs a Python handler: ``python -m mq_cli.worker PATH FORMAT RFD WFD``.

It lives as long as the drain's runner (one import, one class instance, for
many messages) and talks to it over two dedicated pipes, so the handler's own
prints on stdout/stderr never corrupt the protocol.

Frames, both ways: ``>IQ`` (header length, body length), a JSON header, raw
body bytes. JSON and bytes only: nothing the parent reads can execute code.

- child -> parent, once: ``{"ready": true}`` or ``{"ready": false, "error": ...}``
- parent -> child, per message: ``{"id", "queue", "error_count", "created_at"}`` + payload
- child -> parent, per message: ``{"ok": bool, "error": str | null}``

The worker exits when the drain closes its pipe, and dies at once (with what
its handler started) if the drain dies while a handler runs.
"""

from __future__ import annotations

import inspect
import json
import os
import select
import signal
import struct
import sys
import threading
import traceback
from datetime import datetime

from .errors import HandlerNotFound
from .handlers import MessageInfo, _set_current, bounded, load
from .payloads import decode

PREFIX = struct.Struct(">IQ")
MAX_HEADER = 1 << 20
READ_CHUNK = 1 << 16
MAX_READ = 1 << 20


class ProtocolError(Exception):
    """The other side sent something that is not a frame."""


# One encoder for all frames: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode_frame(header: dict[str, object], body: bytes = b"") -> bytes:
    head = _ENCODER.encode(header).encode()
    return PREFIX.pack(len(head), len(body)) + head + body


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

    def next_frame(self) -> tuple[dict[str, object], bytes] | None:
        if len(self.data) < PREFIX.size:
            return None
        head_len, body_len = PREFIX.unpack_from(self.data)
        if head_len > MAX_HEADER:
            raise ProtocolError(f"frame header of {head_len} bytes")
        end = PREFIX.size + head_len + body_len
        if len(self.data) < end:
            return None
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
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_frame(fd: int, buffer: FrameBuffer) -> tuple[dict[str, object], bytes] | None:
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
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # an exception whose __str__ fails must not kill the worker
        text = f"{type(exc).__name__} (its message could not be formatted)"
    return bounded(text.rstrip())


_handler_running = False


def _watch_drain(fd: int) -> None:
    """Kill this worker (and what its handler started) as soon as the drain dies.

    A handler left running after its drain was killed -9 would still be
    working on a message that nobody heartbeats any more; once that message
    is requeued as stalled, another drain would run it at the same time.
    Between messages the main loop sees the EOF itself and exits cleanly.
    """
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: poll still reports POLLHUP/POLLERR
    while not any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll()):
        pass
    if _handler_running:
        # Our own group only when we lead it (start_new_session in the runner).
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


OK: dict[str, object] = {"ok": True}
OK_FRAME = encode_frame(OK)  # the common reply, encoded once


def _run_one(handler: object, fmt: str, header: dict[str, object], body: bytes) -> dict:
    global _handler_running
    info = MessageInfo(
        id=int(header["id"]),  # type: ignore[call-overload]
        queue=str(header["queue"]),
        error_count=int(header["error_count"]),  # type: ignore[call-overload]
        created_at=datetime.fromisoformat(str(header["created_at"])),
    )
    try:
        value = decode(body, fmt)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {"ok": False, "error": f"payload is not valid {fmt}: {exc}"}
    _set_current(info)
    _handler_running = True
    try:
        result = handler(value)  # type: ignore[operator]
        if inspect.iscoroutine(result):
            # An `async def` handler: not awaiting it would count as a success
            # while its work never ran.
            import asyncio

            result = asyncio.run(result)
    except BaseException as exc:  # even SystemExit: it fails the message, not the worker
        return {"ok": False, "error": _describe(exc)}
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
        return {"ok": False, "error": "handler returned False"}
    return OK


def _no_op(signum: int, frame: object) -> None:
    pass


def main(argv: list[str]) -> int:
    path, fmt, rfd, wfd = argv[0], argv[1], int(argv[2]), int(argv[3])
    # The drain decides what a signal means (the first lets the handler finish),
    # so ours must not kill us. A no-op handler rather than SIG_IGN because
    # ignored signals survive exec: programs the handler starts would ignore
    # SIGTERM too.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _no_op)
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
        buffer = FrameBuffer()
        while True:
            frame = _read_frame(rfd, buffer)
            if frame is None:  # the drain closed the pipe or died: nothing more to do
                return 0
            reply = _run_one(handler, fmt, *frame)
            write_all(wfd, OK_FRAME if reply is OK else encode_frame(reply))
    except BrokenPipeError:  # the drain died while we ran a handler
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
