"""A success's DELETE in flight on MariaDB/MySQL (backends/inflight.py).

PyMySQL's ``Connection.query`` is a send (``_execute_command``) and a read
(``_read_query_result``); mq calls the two apart. The values go in as PyMySQL's
own cursor puts them (``Connection.escape``, the driver's escaping), so the
statement is what ``cursor.execute(sql, params)`` would send.
"""

from __future__ import annotations

from typing import Any

from mq_cli.backends import inflight

COM_QUERY = 0x03  # pymysql.constants.COMMAND.COM_QUERY (PyMySQL is imported when first used)
#: how a transaction begins, sent in turn or ahead (ahead.py). Not PyMySQL's begin():
#: its BEGIN opens a block, not a transaction, in sql_mode=ORACLE; START TRANSACTION
#: means one thing in every mode.
START = "START TRANSACTION"
SPLIT = ("_execute_command", "_read_query_result")


def splits_queries(connection_class: type) -> bool:
    """Whether this PyMySQL's connections have the two halves of ``query()``: a
    release that renamed them costs the overlap, not the acknowledgements."""
    return all(callable(getattr(connection_class, name, None)) for name in SPLIT)


class AckInFlight(inflight.AckInFlight):
    def __init__(self, driver_errors: tuple[type[BaseException], ...], usable: bool) -> None:
        super().__init__()
        self.driver_errors = driver_errors
        self.usable = usable

    def _send(self, conn: Any, sql: str, ident: int, owner: str) -> Any:
        conn._execute_command(COM_QUERY, sql % (conn.escape(ident), conn.escape(owner)))
        return conn

    def _receive(self, conn: Any, sent_on: Any) -> int:
        if sent_on is not conn:  # replaced since (forget() marks it lost first)
            raise AssertionError("a DELETE in flight read on another connection")
        return int(sent_on._read_query_result())
