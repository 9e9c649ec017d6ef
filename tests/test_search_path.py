"""PostgreSQL's search_path (issue 31, item 3): mq's table is found where the path
puts it, and nothing else mq runs is: no schema on the path can capture a function
or operator of mq's statements, and `mq init` refuses another application's table
of the same name before it creates anything beside it.
"""

from __future__ import annotations

from mq_cli.core.dburl import parse_database_url
from tests.conftest import Db


def set_search_path(db: Db, path: str) -> None:
    database = parse_database_url(db.url).database
    db.sql(f'ALTER DATABASE "{database}" SET search_path = {path}')


def tables(db: Db) -> list[str]:
    rows = db.sql(
        "SELECT schemaname || '.' || tablename FROM pg_tables "
        "WHERE schemaname IN ('app', 'public') ORDER BY 1"
    )
    return [str(row[0]) for row in rows]


def test_init_refuses_another_table_in_the_first_schema_and_creates_nothing(pg_db: Db):
    pg_db.sql("CREATE SCHEMA app")
    pg_db.sql("CREATE TABLE app.mq_messages (id BIGINT PRIMARY KEY, body TEXT)")
    set_search_path(pg_db, "app, public")
    result = pg_db.run("init")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("mq: table app.mq_messages is not mq's queue table")
    assert "no column queue, payload" in result.stderr and "changed nothing" in result.stderr
    assert tables(pg_db) == ["app.mq_messages"]
    check = pg_db.run("check")
    assert check.exit_code == 1 and "table app.mq_messages has no column queue" in check.stdout
    # mq's table is the one in the path's first schema: a schema of its own first, and
    # init makes it there, beside the other application's untouched.
    pg_db.sql("CREATE SCHEMA mq")
    set_search_path(pg_db, "mq, app, public")
    result = pg_db.run("init")
    assert result.exit_code == 0, result.output
    assert tables(pg_db) == ["app.mq_messages"]
    made = pg_db.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'mq' ORDER BY 1")
    assert ("mq_messages",) in made and ("mq_messages_meta",) in made
