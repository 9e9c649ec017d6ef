"""Which database and table a config means, as a short name for the places that one
host shares among every database its drains use.

A queue's per-host slots and its drains' wake-up FIFOs live in the lock_dir,
outside any database. Named by the queue alone, two configs of one user on one
host (staging and production, two applications) with a queue of the same name
would share them: one's drain would find the other's slots busy, and one's
enqueue would wake the other's drains. So their names carry this identity
(host/slots.py, host/wakeup.py). Names a database server holds for all its
databases (MariaDB's ``GET_LOCK``) carry the database's name instead, as the
server knows it: the backend's ``lock_scope``.
"""

from __future__ import annotations

import os

from mq_cli.core.dburl import DatabaseSettings

#: hex characters of the identity: 48 bits, no collision among one host's databases
LENGTH = 12


def database_id(settings: DatabaseSettings, table: str) -> str:
    """``LENGTH`` hex characters that name ``settings``' database and ``table``.

    Made of the dialect, where the database is (a file: its absolute path, links
    resolved; a server: its host(s) and port, or its socket), the database's name
    and the table; never the user or a password, so two users of one table share
    its slots. Two configs that reach one server by different addresses (a host
    name and an IP, TCP and a socket) get different identities.
    """
    if settings.path is not None:
        where = os.path.realpath(settings.path)
    elif settings.unix_socket:
        where = f"socket {settings.unix_socket} {settings.port}"
    else:
        hosts = settings.hosts or ((settings.host, settings.port),)
        # Sorted: the order of a multi-host URL says which to try first, not which servers.
        where = ",".join(sorted(f"{host.lower()} {port}" for host, port in hosts))
    text = "\0".join((settings.kind, where, settings.database or "", table))
    return _digest(text.encode())


def _digest(data: bytes) -> str:
    try:
        # CPython's own BLAKE2, as hashlib has it, without hashlib's import of
        # OpenSSL (~3 ms, which every `mq enqueue` would pay to wake drains).
        from _blake2 import blake2b
    except ImportError:  # another Python: the same function through hashlib
        from hashlib import blake2b
    return blake2b(data, digest_size=LENGTH // 2).hexdigest()
