"""Storing new messages: one INSERT per message where a unique key may be taken,
else multi-row INSERTs in bounded chunks; the status a new message starts in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from mq_cli.backends.plumbing import Tx
from mq_cli.core.states import Stored


def initial_status(delay: float) -> Stored:
    """A new or retried message's status: 'delayed' until it is due (drains promote
    it then: see create_due_index in <dialect>/<dialect>.sql), else 'ready'."""
    return Stored.DELAYED if delay > 0 else Stored.READY


def insert_each(
    tx: Tx,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    when: object,
    priority: int,
    unique_key: str | None,
    duplicate: Callable[[BaseException], bool],
    status: Stored = Stored.READY,
) -> list[int | None]:
    """One INSERT per message (the unique-key path): ids, None where the key was taken."""
    ids: list[int | None] = []
    for payload in payloads:
        if unique_key is not None:
            tx.change(sql["purge_expired_key"], (queue, unique_key))
        try:
            params = (queue, status, priority, when, unique_key, payload)
            ids.append(tx.insert(sql["insert_one"], params))
        except Exception as exc:
            if not duplicate(exc):
                raise
            ids.append(None)  # the key is taken: skipped, as documented
    return ids


def insert_rows(
    tx: Tx,
    sql: dict[str, str],
    queue: str,
    payloads: Sequence[bytes],
    when: object,
    priority: int,
    chunking: tuple[int, int, Callable[[bytes], int]],
    ids: Callable[[Tx, str, list[object], int], list[int]],
    statement: str = "insert",
    status: Stored = Stored.READY,
) -> list[int | None]:
    """Keyless messages in multi-row INSERTs of at most ``chunking`` = (rows, budget,
    cost); ``ids(tx, sql, params, count)`` runs one and says the new ids, in order."""
    result: list[int | None] = []
    for chunk in chunks(payloads, *chunking):
        values = ",".join([sql["insert_row"]] * len(chunk))
        params: list[object] = []
        for payload in chunk:
            params += (queue, status, priority, when, None, payload)
        result += ids(tx, sql[statement].replace("{values}", values), params, len(chunk))
    return result


def chunks(
    payloads: Iterable[bytes], rows: int, budget: int, cost: Callable[[bytes], int]
) -> Iterator[list[bytes]]:
    """Payloads in groups of at most ``rows``, each within ``budget`` (at least one each)."""
    chunk: list[bytes] = []
    size = 0
    for payload in payloads:
        price = cost(payload)
        if chunk and (size + price > budget or len(chunk) >= rows):
            yield chunk
            chunk, size = [], 0
        chunk.append(payload)
        size += price
    if chunk:
        yield chunk
