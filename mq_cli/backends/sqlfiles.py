"""The dialects' SQL files (<dialect>/<dialect>.sql): named blocks loaded into a dict,
and the placeholders of a list of values.
"""

from __future__ import annotations

import os
import re
from functools import cache

from mq_cli.backends.liveness import GRACE


def placeholders(count: int, mark: str) -> str:
    """``%s, %s, %s`` for an IN list of ``count`` bound values."""
    return ", ".join([mark] * count)


_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


#: where the dialect packages (<dialect>/, with its <dialect>.sql) are: this package's
#: folder (a test adds one with a dialect of its own; dialects.discover puts it on __path__)
FOLDERS = [os.path.dirname(os.path.abspath(__file__))]


def sql_file(folder: str, dialect: str) -> str:
    """Where the package of ``dialect`` in ``folder`` keeps its statements."""
    return os.path.join(folder, dialect, f"{dialect}.sql")


def _read_sql(dialect: str) -> str:
    # A plain file in the dialect's package (package data); importlib.resources
    # would add ~8 ms to every cold start of the CLI.
    path = next(
        (p for f in FOLDERS if os.path.exists(p := sql_file(f, dialect))),
        sql_file(FOLDERS[0], dialect),
    )
    with open(path, encoding="utf-8") as handle:
        return handle.read()


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The ``-- name: x`` blocks of ``<dialect>/<dialect>.sql`` as {name: statement}."""
    text = _read_sql(dialect)
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


def queries(dialect: str, table: str, **more: str) -> dict[str, str]:
    """The dialect's named statements for ``table`` (and other ``{name}`` substitutions)."""
    result = {}
    more = {"grace": f"{GRACE:g}", **more}
    for name, sql in load_queries(dialect).items():
        sql = sql.replace("{table}", table)
        for key, value in more.items():
            sql = sql.replace("{" + key + "}", value)
        result[name] = sql
    return result
