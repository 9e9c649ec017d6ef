"""An enqueue's transaction whose connection is lost: resolved, not passed on.

A lost connection before the COMMIT went out rolled the transaction back, so the
batch is stored again on a new connection. One lost at the COMMIT leaves it
unknown whether the server committed: the dialect finds out (PostgreSQL asks
its commit log, :func:`txid_committed`; MariaDB looks for the rows), and where
it cannot tell, CommitUnknown says so (and the enqueue, what retry is safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from mq_cli.backends.plumbing import Tx
from mq_cli.core.errors import CommitUnknown, ConnectionLost, DatabaseError, ReadOnly

T = TypeVar("T")
Ids = list[int | None]
#: an enqueue whose connection is lost before its COMMIT is tried this often in all
TRIES = 3
#: after a lost COMMIT answer, how long its transaction may stay "in progress" (its
#: session not yet torn down) before mq says it cannot tell
SETTLES = 10.0


def store_once(
    transaction: Callable[[Callable[[Tx], Ids]], Ids],
    body: Callable[[Tx], Ids],
    proof_of: Callable[[Tx], object],
    committed: Callable[[object, Ids], bool | None],
    reconnect: Callable[[], None],
    count: int,
) -> Ids:
    """Run ``transaction(body)`` until it is known to have stored the batch once.

    ``proof_of(tx)`` runs first in the transaction (what ``committed(proof, ids)``
    will ask about after a lost COMMIT, on a new connection: True, False or None
    for "cannot tell")."""
    proof: list[object] = []
    stored: list[Ids] = []

    def recorded(tx: Tx) -> Ids:
        proof[:] = [proof_of(tx)]
        ids = body(tx)
        stored[:] = [ids]  # the body ran: only the COMMIT is left
        return ids

    for _ in range(TRIES):
        proof.clear()
        stored.clear()
        try:
            return transaction(recorded)
        except ReadOnly:
            raise  # refused, not lost: nothing was stored
        except ConnectionLost as exc:
            if not stored:  # lost before the COMMIT went out: rolled back, store it again
                reconnect()
                continue
            cause: DatabaseError = exc
            try:
                outcome = committed(proof[0], stored[0])
            except DatabaseError as later:  # the database is away: it cannot say either
                cause, outcome = later, None
            if outcome:
                return stored[0]
            if outcome is None:
                # What to do is the caller's to say (ops/produce.retry_advice): it
                # knows the queue's unique_retention, without which a unique key
                # cannot stop a retry of a message that was stored and run.
                raise CommitUnknown(
                    f"{cause}; the connection was lost at the COMMIT of {count} message(s) "
                    "and mq cannot tell whether they were stored"
                ) from cause
    raise ConnectionLost(
        f"lost the connection {TRIES} times before a batch of {count} message(s) "
        "committed: that batch was not stored"
    )


def txid_committed(status: Callable[[], str | None]) -> bool | None:
    """PostgreSQL: what ``status()`` (txid_status of the enqueue's transaction, on a
    new connection) says, once its old session is torn down."""
    end = time.monotonic() + SETTLES
    while (state := status()) == "in progress" and time.monotonic() < end:
        time.sleep(0.05)  # its session is still being torn down: it cannot commit now
    return {"committed": True, "aborted": False}.get(state or "")


def rows_committed(ids: Sequence[int | None], present: Callable[[list[int]], int]) -> bool | None:
    """Without a commit log: some of the rows are there (committed), or none are
    (never stored, or stored and run by a drain already: cannot tell)."""
    new = [i for i in ids if i is not None]
    if not new:
        return True  # nothing to store (every unique key was taken)
    return True if present(new) else None
