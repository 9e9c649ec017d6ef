"""Text views for people: tables of messages, one message in full, payloads.

No click here: functions return strings, or write through the ``echo``
callable they are given, so the CLI decides where output goes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from mq_cli.core.durations import format_duration
from mq_cli.core.models import Listing, Message, iso
from mq_cli.core.states import State, Stored

ERROR_WIDTH = 60  # characters of last_error in a table
HEXDUMP_LIMIT = 4096  # bytes of a binary payload `mq show` dumps
TEXT_LIMIT = 64 * 1024  # characters of a text payload `mq show` prints (--json: all)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not \t \n \r
# What a terminal obeys instead of showing: C0 and C1 controls (ESC and CSI start
# clear-screen, retitle and OSC 52 clipboard writes) and the bidi controls that
# reorder what is shown (an "evil" that reads "live"). Tab and newline are kept.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """``text`` with every control and bidi character written as an escape (``\\x1b``,
    ``\\u202e``): safe to show on a terminal, where stored text must never act."""
    return _UNSAFE.sub(_escaped, text)


def printable_json(text: str) -> str:
    """:func:`printable` for JSON text: the escapes are JSON's (``\\u009b``), so it
    still decodes to the same value. Outside strings JSON has no such characters."""
    return _UNSAFE.sub(_json_escaped, text)


def table(headers: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    """Columns padded to their widest cell; ``align`` is one '<' or '>' per column
    (default: the first left, the rest right)."""
    return "\n".join(TableWriter(headers, align).lines(rows))


class TableWriter:
    """A table printed in pages as rows arrive: the header once, widths growing as needed."""

    def __init__(self, headers: list[str], align: str | None = None):
        self.headers = headers
        self.align = align or "<" + ">" * (len(headers) - 1)
        self.widths = [len(h) for h in headers]
        self.started = False

    def lines(self, rows: Sequence[Sequence[Any]]) -> list[str]:
        cells = [[str(c) for c in row] for row in rows]
        for row in cells:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, row, strict=True)]
        if not self.started:
            cells.insert(0, self.headers)
            self.started = True
        return [self._line(row) for row in cells]

    def _line(self, row: list[str]) -> str:
        parts = [
            cell.ljust(width) if side == "<" else cell.rjust(width)
            for cell, width, side in zip(row, self.widths, self.align, strict=True)
        ]
        return "  ".join(parts).rstrip()


class JsonArray:
    """A JSON array written item by item, so a long list never sits in memory."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.count = 0

    def add(self, items: Sequence[dict[str, object]]) -> None:
        for item in items:
            self.echo(("[" if self.count == 0 else ",") + json.dumps(item))
            self.count += 1

    def close(self) -> None:
        self.echo("[]" if self.count == 0 else "]")


# -- pieces -------------------------------------------------------------------------


def since(now: datetime, moment: datetime | None) -> str:
    """How long ago ``moment`` was, short: ``45s``, ``12m``, ``3h05m``; ``-`` for none."""
    if moment is None:
        return "-"
    return format_duration(max((now - moment).total_seconds(), 0.0))


def error_line(error: str | None, width: int = ERROR_WIDTH) -> str:
    """The last line of last_error (where a traceback names the exception), cut to ``width``."""
    if not error:
        return ""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    text = printable(lines[-1]) if lines else ""
    return text if len(text) <= width else text[: width - 3] + "..."


def is_stalled(message: Message, now: datetime, stalled_after: float) -> bool:
    return (
        message.status == Stored.PROCESSING
        and message.heartbeat_at is not None
        and (now - message.heartbeat_at).total_seconds() > stalled_after
    )


# -- mq list, mq gc -----------------------------------------------------------------

LIST_HEADERS = ["ID", "STATUS", "PRI", "ERRORS", "AGE", "AVAILABLE IN", "LAST ERROR"]
LIST_ALIGN = "<<>>>><"


def list_rows(listing: Listing) -> list[list[str]]:
    now = listing.now
    rows = []
    for m in listing.messages:
        status: str = listing.states.get(m.id) or (
            State.STALLED if is_stalled(m, now, listing.stalled_after) else m.status
        )
        doing = listing.activity.get(m.id)
        if doing is not None:
            kind, seconds = doing
            status = f"running {format_duration(seconds)}" if seconds is not None else kind
        wait = (m.available_at - now).total_seconds()
        available = format_duration(wait) if m.status == Stored.READY and wait > 0 else "-"
        row = [str(m.id), status, str(m.priority), str(m.error_count), since(now, m.created_at),
               available, error_line(m.last_error)]  # fmt: skip
        rows.append(row if listing.queue else [printable(m.queue), *row])
    return rows


def list_table(listing: Listing) -> str:
    if listing.queue:
        return table(LIST_HEADERS, list_rows(listing), LIST_ALIGN)
    return table(["QUEUE", *LIST_HEADERS], list_rows(listing), "<" + LIST_ALIGN)


def gc_table(
    kind: State,
) -> tuple[TableWriter, Callable[[list[Message], datetime], list[list[str]]]]:
    """A table for `mq gc` matches, and what turns a batch of them into its rows."""
    if kind == State.STALLED:
        headers = ["ID", "QUEUE", "ERRORS", "AGE", "NO HEARTBEAT FOR", "DRAIN (OWNER)"]

        def stalled_rows(batch: list[Message], now: datetime) -> list[list[str]]:
            return [
                [str(m.id), m.queue, str(m.error_count), since(now, m.created_at),
                 since(now, m.heartbeat_at), printable(m.owner or "-")]
                for m in batch
            ]  # fmt: skip

        return TableWriter(headers, "<<>>><"), stalled_rows
    headers = ["ID", "QUEUE", "ERRORS", "AGE", "FAILED FOR", "LAST ERROR"]

    def failed_rows(batch: list[Message], now: datetime) -> list[list[str]]:
        # A failed message's available_at is when it failed (see ack_failure).
        return [
            [str(m.id), m.queue, str(m.error_count), since(now, m.created_at),
             since(now, m.available_at), error_line(m.last_error)]
            for m in batch
        ]  # fmt: skip

    return TableWriter(headers, "<<>>><"), failed_rows


# -- mq show --------------------------------------------------------------------------


def message_text(
    message: Message,
    now: datetime,
    activity: tuple[str, float | None] | None = None,
    state: State | None = None,
) -> str:
    """Every field, last_error in full, then the payload as readably as it allows."""

    def when(moment: datetime | None) -> str:
        if moment is None:
            return "-"
        seconds = (moment - now).total_seconds()
        relative = f"in {format_duration(seconds)}" if seconds > 0 else f"{since(now, moment)} ago"
        return f"{iso(moment)} ({relative})"

    fields = [
        ("id", str(message.id)),
        ("queue", printable(message.queue)),
        ("status", _status_line(message, now, activity, state or State(message.status))),
        ("priority", str(message.priority)),
        ("error_count", str(message.error_count)),
        ("created_at", when(message.created_at)),
        ("available_at", when(message.available_at)),
        ("unique_key", printable(message.unique_key or "-")),
        ("owner", printable(message.owner or "-")),
        ("heartbeat_at", when(message.heartbeat_at)),
    ]
    lines = [f"{name + ':':<14}{value}" for name, value in fields]
    if message.last_error:
        lines.append("last_error:")
        lines += ["  " + printable(line) for line in message.last_error.splitlines()]
    else:
        lines.append(f"{'last_error:':<14}-")
    kind, view = payload_view(message.payload or b"")
    lines.append(f"payload ({len(message.payload or b'')} bytes, {kind}):")
    lines.append(view)
    return "\n".join(lines)


def _status_line(
    message: Message, now: datetime, activity: tuple[str, float | None] | None, state: State
) -> str:
    """The state as `mq list` and `mq stats` call it, and what it means now."""
    if state == State.DELAYED:
        wait = format_duration((message.available_at - now).total_seconds())
        return f"delayed (ready in {wait})"
    if state == State.STALLED:
        drain = printable(message.owner or "?")
        return (
            f"stalled (stored as processing by drain {drain}, which is gone or silent "
            f"past stalled_after; `mq gc --stalled --requeue -q {printable(message.queue)}` "
            "runs it again)"
        )
    return state + _activity_note(message, activity)


def _activity_note(message: Message, activity: tuple[str, float | None] | None) -> str:
    if activity is None:
        return ""
    kind, seconds = activity
    drain = printable(message.owner or "?")
    if seconds is not None:
        return f" (running for {format_duration(seconds)} in drain {drain})"
    return f" (waiting in the batch of drain {drain}, which runs another message)"


def payload_view(payload: bytes) -> tuple[str, str]:
    """(what it is, how to show it): pretty JSON, text, or a hex dump of binary data."""
    if not payload:
        return "empty", ""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return "binary, hex dump", hexdump(payload)
    if _CONTROL.search(text):  # would garble or drive the terminal
        return "binary, hex dump", hexdump(payload)
    if len(text) > TEXT_LIMIT:  # 16 MB on a terminal helps nobody; nor pretty-printing it
        head = text[:TEXT_LIMIT]
        left = len(payload) - len(head.encode("utf-8"))
        note = f"... {left} more bytes left out (--json shows all of it)"
        return f"text, the first {TEXT_LIMIT} characters", f"{printable(head)}\n{note}"
    try:
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):  # too deep to parse or indent: shown as it is
        return "text", printable(text)
    return "JSON", printable_json(pretty)


def hexdump(data: bytes, limit: int = HEXDUMP_LIMIT) -> str:
    """``hexdump -C`` style; past ``limit`` bytes, a note on how to get all of it."""
    lines = []
    for offset in range(0, min(len(data), limit), 16):
        chunk = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk[:8])
        if len(chunk) > 8:
            hexes += "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<49} |{text}|")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit} more bytes (--json shows all of it, as base64)")
    return "\n".join(lines)
