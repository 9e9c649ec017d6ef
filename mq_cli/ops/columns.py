"""What the console's queue page lists beyond `mq list`: a payload preview, "next retry
at" and "failed at".

The preview is made from the first :data:`HEAD_BYTES` of each payload, cut in SQL
(``Backend.payload_heads``): a page of 50 messages of 50 MB each reads 50 short
heads and 50 lengths, never a payload. Text shows as one line of at most
:data:`WIDTH` characters, bidi and control characters written as escapes; anything
that is not UTF-8 text shows as "binary, N bytes".

"Next retry at" is a delayed message's available_at. "Failed at" is a failed
message's available_at: the schema has no column of its own for it, and needs
none, since every statement that makes a message failed (a drain's ack_failure at
max_errors, gc's requeue of a stalled message at max_errors) sets available_at to
the database's now, and nothing changes a failed row's available_at afterwards
(retry makes it ready, with a new available_at).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mq_cli.backends.base import Backend
from mq_cli.core.models import Message
from mq_cli.core.render import printable
from mq_cli.core.states import State

#: characters of a preview
WIDTH = 80
#: bytes read of each payload: WIDTH characters of UTF-8 fit in 4 bytes each
HEAD_BYTES = 4 * WIDTH
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # controls but tab, newline, CR


@dataclass(frozen=True)
class Columns:
    """One listed message's extra columns."""

    preview: str
    binary: bool
    next_retry_at: datetime | None  # delayed: when it is due
    failed_at: datetime | None  # failed: when it failed


def preview(head: bytes, size: int, width: int = WIDTH) -> tuple[str, str]:
    """(kind, text) of a payload of ``size`` bytes whose first bytes are ``head``:
    ("empty", ""), ("binary", "binary, N bytes") or ("text", one line, "…" when cut)."""
    if size == 0:
        return "empty", ""
    try:
        # not final while bytes follow: a character cut at the head's end is not binary
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) >= size)
    except UnicodeDecodeError:
        return "binary", f"binary, {size} bytes"
    if _BINARY.search(text):
        return "binary", f"binary, {size} bytes"
    line = " ".join(text.split())  # one line: newlines and runs of blanks as one space
    cut = len(line) > width or len(head) < size
    return "text", printable(line[:width]) + ("…" if cut else "")


def columns(
    backend: Backend, messages: Sequence[Message], states: Mapping[int, State]
) -> dict[int, Columns]:
    """The extra columns of a page of messages (``states``: each one's state), in one query."""
    heads = backend.payload_heads([m.id for m in messages], HEAD_BYTES)
    found = {}
    for m in messages:
        head, size = heads.get(m.id, (b"", 0))
        kind, text = preview(head, size)
        state = states.get(m.id)
        found[m.id] = Columns(
            text, kind == "binary",
            m.available_at if state == State.DELAYED else None,
            m.available_at if state == State.FAILED else None,
        )  # fmt: skip
    return found
