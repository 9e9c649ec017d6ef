"""Splitting a producer's input into messages, streaming with bounded memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from mq_cli.core.errors import PayloadTooLarge

CHUNK = 1 << 20


def _too_large(label: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{label} is larger than the database accepts ({limit} bytes)")


def whole(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """All of the stream as one message."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise _too_large("stdin", limit)
    yield "stdin", data


def _read_some(stream: BinaryIO) -> bytes:
    # What is there now, up to CHUNK: a producer that writes a line now and then
    # must not wait for a whole chunk to fill.
    read1 = getattr(stream, "read1", None)
    return read1(CHUNK) if read1 is not None else stream.read(CHUNK)


def _split(parts: list[bytes], chunk: bytes, sep: bytes) -> list[bytes] | None:
    """Complete records ended in ``chunk``, the last item being the start of the next
    one; None if ``chunk`` ends none (then it joins ``parts``, the record being read).

    Only the new chunk is searched for ``sep``: scanning the whole record again
    for every chunk made one long line through a pipe (64 KiB reads) quadratic.
    """
    if not parts:
        return chunk.split(sep)
    cut = chunk.find(sep)
    if cut < 0:
        parts.append(chunk)
        return None
    parts.append(chunk[:cut])
    head = b"".join(parts)
    parts.clear()
    records = chunk[cut + 1 :].split(sep)
    records.insert(0, head)
    return records


def lines(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """Each non-blank line one message (its line ending removed), labelled ``line N``.

    A line longer than ``limit`` is refused (PayloadTooLarge) unless it is
    blank: blank lines are skipped whatever their length, in bounded memory.
    """
    # Chunks split in C, not a readline() per line: at 200-byte lines the
    # per-line Python cost is a visible share of the whole enqueue.
    number = 0
    parts: list[bytes] = []  # the line being read, without what `dropped` counts
    size = 0  # bytes in parts
    dropped = 0  # leading bytes of it already known to be whitespace, not kept
    while chunk := _read_some(stream):
        records = _split(parts, chunk, b"\n")
        if records is None:
            size += len(chunk)
        else:
            pending = records.pop()
            if pending:
                parts.append(pending)
            size = len(pending)
            for line in records:
                number += 1
                length, dropped = dropped + len(line), 0
                if not line or line.isspace():
                    continue
                if line.endswith(b"\r"):
                    line = line[:-1]
                    length -= 1
                if length > limit:
                    raise _too_large(f"line {number}", limit)
                yield f"line {number}", line
        if dropped + size > limit + 1:  # + 1: a "\r" may still come off
            pending = b"".join(parts)
            if not pending.isspace():
                raise _too_large(f"line {number + 1}", limit)
            # Blank so far: keep its last byte only, count the rest.
            dropped += len(pending) - 1
            parts[:] = [pending[-1:]]
            size = 1
    pending = b"".join(parts)
    if pending and not pending.isspace():
        number += 1
        line = pending[:-1] if pending.endswith(b"\r") else pending
        if dropped + len(line) > limit:
            raise _too_large(f"line {number}", limit)
        yield f"line {number}", line


def nul_separated(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """Each non-empty NUL-terminated item one message, labelled ``item N``."""
    number = 0
    parts: list[bytes] = []
    size = 0
    while chunk := _read_some(stream):
        records = _split(parts, chunk, b"\0")
        if records is None:
            size += len(chunk)
        else:
            pending = records.pop()
            if pending:
                parts.append(pending)
            size = len(pending)
            for part in records:
                number += 1
                if part:
                    yield f"item {number}", part
        if size > limit:
            raise _too_large(f"item {number + 1}", limit)
    if parts:
        yield f"item {number + 1}", b"".join(parts)
