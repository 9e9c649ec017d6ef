"""SQLite's operators' part, with payload heads read through incremental blob I/O.

``substr(payload, 1, n)`` makes SQLite read the whole payload (every overflow page)
before it cuts it: 50 payloads of 5 MB took 200 ms, of 50 MB seconds. A blob handle
(``Connection.blobopen``, Python 3.11+) reads only the pages of the bytes asked for
and knows the length from the record: the same 50 heads take under a millisecond.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from mq_cli.backends.sqlops import MAX_ID, SqlOperate


class SqliteOperate(SqlOperate):
    def payload_heads(self, ids: Sequence[int], size: int) -> dict[int, tuple[bytes, int]]:
        conn: Any = getattr(self.db, "conn", None)  # the dialect's sqlite3 connection
        real = [ident for ident in ids if 0 < ident <= MAX_ID]
        if not real or not hasattr(conn, "blobopen"):  # Python 3.10: the SQL's substr
            return super().payload_heads(ids, size)
        # which of them are live messages (not tombstones), in SQL as everywhere
        live = self.db._rows(self.db._with_ids("search_ids", real), real)
        heads = {}
        try:
            for row in live:
                with conn.blobopen(self.db.table, "payload", int(row[0]), readonly=True) as blob:
                    heads[int(row[0])] = (blob.read(size), len(blob))
        except sqlite3.Error:  # a row gone meanwhile, a payload stored as text: the SQL way
            return super().payload_heads(ids, size)
        return heads
