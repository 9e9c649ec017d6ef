"""The example handlers: small, dependency-free stand-ins for an application's."""

from __future__ import annotations

from pathlib import PurePosixPath

from mq_cli.runners.handlers import current_message

#: what ``thumbnail`` takes for an image, by the path's suffix
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp")


def thumbnail(payload: dict) -> str:
    """Say which thumbnail a real handler would make for ``{"path": "..."}``.

    A path that is not an image raises ``ValueError``: the message is retried
    after its backoff and, after ``max_errors`` failures, kept as ``failed``.
    What it prints goes to the drain's stderr.
    """
    path = PurePosixPath(str(payload["path"]))
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise ValueError(f"not an image: {path}")
    target = path.with_name(f"{path.stem}.thumb{path.suffix}")
    print(f"thumbnail: message {current_message().id}: {path} -> {target}", flush=True)
    return str(target)


def word_count(payload: str) -> int:
    """Count the words of a ``text`` queue's message (``format: text``)."""
    words = len(payload.split())
    print(f"word_count: message {current_message().id}: {words} word(s)", flush=True)
    return words
