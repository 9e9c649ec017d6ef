"""The meta table's rows that are not the schema version: paused queues and
the notes of queues no drain could start, by name.
"""

from __future__ import annotations


def pause_key(queue: str, kind: str = "paused") -> str:
    """The meta row of a paused queue (or of another ``kind`` of note): meta names
    hold 64 characters, queue names as many, so a long one is named by its hash
    (the value says which queue)."""
    if len(kind) + 1 + len(queue) <= 64:
        return f"{kind}:{queue}"
    import hashlib

    return f"{kind}#" + hashlib.sha256(queue.encode()).hexdigest()[:50]
