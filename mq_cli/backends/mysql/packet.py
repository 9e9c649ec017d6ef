"""How large a payload a MySQL/MariaDB server takes in one statement (max_allowed_packet)."""

from __future__ import annotations

_ESCAPED = b"\0\n\r\x1a\\'\""  # each takes two bytes in PyMySQL's SQL text


def escaped_size(payload: bytes) -> int:
    """Bytes the payload takes inside PyMySQL's SQL text (`_binary'...'`)."""
    # One pass in C (per message, three times on the enqueue path).
    return 2 * len(payload) - len(payload.translate(None, _ESCAPED)) + 10


def max_payload(max_packet: int) -> int:
    """The largest payload a server with this max_allowed_packet stores.

    Measured on MariaDB 10.11: a statement whose values add up to more than
    max_allowed_packet / 2 - 16 bytes makes the server drop the connection,
    however they are escaped; 1 KiB leaves room for the rest of the statement.
    """
    return max_packet // 2 - 1024


def too_large_hint(max_packet: int) -> str:
    return (
        f"max_allowed_packet = {max_packet} allows payloads up to {max_payload(max_packet)} "
        "bytes, half of it; raise max_allowed_packet on the server for larger ones"
    )
