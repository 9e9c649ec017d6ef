"""What the console takes in and shows: whole numbers from a request, and text made visible.

A number from the address is parsed here only: ``str.isdecimal`` (``"²".isdigit()``
is true and ``int("²")`` fails) and a range a database column holds (a signed 64-bit
id), so a bad one is a 400, never a driver's overflow and a 500. What a template
prints goes through :func:`visible` (the Jinja environment's ``finalize``): control
characters (but tab, newline and carriage return) and the invisible and bidirectional format characters become ``\\uXXXX``
text, so a U+202E in an error cannot reverse what the page shows.
"""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup
from werkzeug.exceptions import BadRequest
from werkzeug.routing import BaseConverter

from mq_cli.core.errors import ConfigError

#: the largest id a BIGINT holds (SQLite's INTEGER, MariaDB's and PostgreSQL's BIGINT)
ID_MAX = 2**63 - 1

# C0 controls but tab, newline and carriage return (a CRLF text shows as text), DEL, C1 controls; Arabic letter mark; zero-width
# space, joiners and the LTR/RTL marks; the embeddings and overrides; the word joiner
# and invisible operators; the isolates; the byte-order mark (zero-width no-break space).
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


def whole(name: str, raw: str, low: int = 1, high: int = ID_MAX) -> int:
    """``raw`` as a whole number from ``low`` to ``high``; ConfigError (400) otherwise."""
    if not (raw.isascii() and raw.isdecimal()) or not low <= int(raw) <= high:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise ConfigError(f"{name} must be a whole number from {low} to {high}, not {shown!r}")
    return int(raw)


def visible(value: Any) -> Any:
    """``value`` with every hidden character written as ``\\uXXXX`` (other values as given)."""
    if not isinstance(value, str) or _HIDDEN.search(value) is None:
        return value
    shown = _HIDDEN.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
    # markup stays markup: only characters that need no escaping were replaced
    return Markup(shown) if isinstance(value, Markup) else shown


class IdConverter(BaseConverter):
    """The ``int`` of the console's routes: a message id, 400 (not 500) when out of range."""

    regex = r"\d+"
    weight = 50

    def to_python(self, value: str) -> int:
        try:
            return whole("a message id", value)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None

    def to_url(self, value: Any) -> str:
        return str(int(value))
