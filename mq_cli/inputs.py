"""Splitting a producer's input into messages, streaming with bounded memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .errors import PayloadTooLarge

CHUNK = 1 << 20


def _too_large(label: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{label} is larger than the database accepts ({limit} bytes)")


def whole(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """All of the stream as one message."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise _too_large("stdin", limit)
    yield "stdin", data


def lines(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """Each non-blank line one message (its line ending removed), labelled ``line N``."""
    number = 0
    while True:
        line = stream.readline(limit + 2)
        if not line:
            return
        number += 1
        if not line.endswith(b"\n") and len(line) > limit:
            raise _too_large(f"line {number}", limit)
        line = line[:-1] if line.endswith(b"\n") else line
        line = line[:-1] if line.endswith(b"\r") else line
        if line.strip():
            yield f"line {number}", line


def nul_separated(stream: BinaryIO, limit: int) -> Iterator[tuple[str, bytes]]:
    """Each non-empty NUL-terminated item one message, labelled ``item N``."""
    number = 0
    pending = b""
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        parts = (pending + chunk).split(b"\0")
        pending = parts.pop()
        for part in parts:
            number += 1
            if part:
                yield f"item {number}", part
        if len(pending) > limit:
            raise _too_large(f"item {number + 1}", limit)
    if pending:
        yield f"item {number + 1}", pending
