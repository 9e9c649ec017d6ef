"""Turning input into stored payload bytes and back, per the queue's ``format``."""

from __future__ import annotations

import json
from collections.abc import Callable

from mq_cli.core.errors import ConfigError, InputRejected

TYPE_CHECKING = False  # not typing's: the handler's child imports this module at start
if TYPE_CHECKING:
    from typing import Any

FORMATS = ("json", "text", "bytes")
TOO_DEEP = "too deeply nested (JSON arrays and objects in each other ~1,000 levels deep)"


def _known(fmt: str) -> None:
    # The API takes format= from the caller: a typo ("jsn") must not silently mean "text".
    if fmt not in FORMATS:
        raise ConfigError(f"unknown payload format {fmt!r}: use one of {', '.join(FORMATS)}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every check: json.loads with an option builds a new decoder
# (and scanner) per call, which cost more than the parsing of a 200-byte line.
_STRICT = json.JSONDecoder(parse_constant=_no_constants)


def check_payload(data: bytes, fmt: str) -> None:
    """Raise ValueError when ``data`` is not a valid payload of format ``fmt``."""
    checker(fmt)(data)


def checker(fmt: str) -> Callable[[bytes], None]:
    """:func:`check_payload` for one format, for a loop over many payloads."""
    _known(fmt)
    return _CHECKS[fmt]


def _check_bytes(data: bytes) -> None:
    pass


def _check_text(data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None


def _check_json(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        _STRICT.decode(text)
    except RecursionError:  # ~1,000 levels of [ or {: the parser's stack, not a bug of ours
        raise ValueError(TOO_DEEP) from None
    except ValueError as exc:
        if not text or text.isspace():
            raise ValueError("invalid JSON: empty") from None
        raise ValueError(f"invalid JSON: {exc}") from None


_CHECKS: dict[str, Callable[[bytes], None]] = {
    "json": _check_json,
    "text": _check_text,
    "bytes": _check_bytes,
}


def encode(value: object, fmt: str) -> bytes:
    """Stored bytes for a value given to the Python API.

    ``bytes`` are stored as they are (and must be valid for the format); for a
    json queue any other value is serialised with ``json.dumps``; a text queue
    takes ``str``.
    """
    _known(fmt)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif fmt == "json":
        try:
            data = json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode()
        except (TypeError, ValueError) as exc:
            raise InputRejected(f"payload cannot be stored as JSON: {exc}") from None
        except RecursionError:
            raise InputRejected(f"payload cannot be stored as JSON: {TOO_DEEP}") from None
    elif isinstance(value, str):
        data = value.encode("utf-8")
    else:
        raise InputRejected(
            f"a {fmt} queue takes str or bytes payloads, not {type(value).__name__}"
        )
    try:
        check_payload(data, fmt)
    except ValueError as exc:
        raise InputRejected(f"payload rejected: {exc}") from None
    return data


_decode_json = json.JSONDecoder().decode  # json.loads' own decoder (no options)
# A first byte json.detect_encoding() may read as other than UTF-8 (a zero second
# byte too): a BOM, UTF-16 or UTF-32.
_NOT_PLAIN_UTF8 = (b"", b"\0", b"\xef", b"\xfe", b"\xff")


def decode(data: bytes, fmt: str) -> object:
    """What a Python handler receives for a stored payload (ValueError if it is not valid)."""
    if fmt == "json":
        try:
            if data[:1] not in _NOT_PLAIN_UTF8 and data[1:2] != b"\0":
                # What json.loads does for UTF-8 bytes, without finding their encoding
                # first (~1 µs of a no-op handler's ~3 a message in the child)
                return _decode_json(data.decode("utf-8", "surrogatepass"))
            return json.loads(data)  # UTF-16 or -32, a BOM, empty: its own way
        except RecursionError:  # stored before mq checked the depth, or by another program
            raise ValueError(TOO_DEEP) from None
    if fmt == "text":
        return data.decode("utf-8")
    return data
