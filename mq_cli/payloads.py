"""Turning input into stored payload bytes and back, per the queue's ``format``."""

from __future__ import annotations

import json
from typing import Any

from .errors import ConfigError, InputRejected

FORMATS = ("json", "text", "bytes")


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
    _known(fmt)
    if fmt == "bytes":
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None
    if fmt == "json":
        if not text or text.isspace():
            raise ValueError("invalid JSON: empty")
        try:
            _STRICT.decode(text)
        except ValueError as exc:
            raise ValueError(f"invalid JSON: {exc}") from None


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


def decode(data: bytes, fmt: str) -> object:
    """What a Python handler receives for a stored payload."""
    if fmt == "json":
        return json.loads(data)
    if fmt == "text":
        return data.decode("utf-8")
    return data
