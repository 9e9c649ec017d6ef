"""Fixtures of the fault suite.

``fault_mysql``: a fresh MariaDB database with the schema, like the suite's
``mysql_db`` but robust to the server restarting mid-test: the database is
dropped through a new connection, after making sure the server is up again.
``fault_pg``: the same on PostgreSQL; ``fault_db``: each scenario on both.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from mq_cli.core.dburl import parse_database_url
from tests.conftest import MYSQL_URL, PG_URL, Db, _pg_connect, cannot_run_here


def admin() -> pymysql.connections.Connection:
    s = parse_database_url(MYSQL_URL)
    return pymysql.connect(
        host=s.host, port=s.port, user=s.user or "root", password=s.password or "",
        unix_socket=s.unix_socket, autocommit=True, connect_timeout=5, ssl_disabled=True,
    )  # fmt: skip


@pytest.fixture
def fault_mysql(tmp_path: Path) -> Iterator[Db]:
    try:
        conn = admin()
    except pymysql.MySQLError as exc:
        cannot_run_here(f"MariaDB at {MYSQL_URL} unreachable: {exc}")
    name = "mqf_" + uuid.uuid4().hex[:12]
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    conn.close()
    rest = re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", MYSQL_URL.split("://", 1)[1], count=1)
    db = Db("mysql", MYSQL_URL.split("://", 1)[0] + "://" + rest, tmp_path)
    try:
        result = db.run("init")
        assert result.exit_code == 0, result.output
        yield db
    finally:
        conn = admin()
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


@pytest.fixture
def fault_pg(tmp_path: Path) -> Iterator[Db]:
    try:
        conn = _pg_connect(PG_URL)
    except Exception as exc:  # noqa: BLE001 - no driver or no server
        cannot_run_here(f"PostgreSQL at {PG_URL} unreachable: {exc}")
    name = "mqf_" + uuid.uuid4().hex[:12]
    conn.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    rest = re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", PG_URL.split("://", 1)[1], count=1)
    db = Db("postgres", PG_URL.split("://", 1)[0] + "://" + rest, tmp_path)
    try:
        result = db.run("init")
        assert result.exit_code == 0, result.output
        yield db
    finally:
        conn = _pg_connect(PG_URL)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


@pytest.fixture(params=["mysql", "postgres"])
def fault_db(request: pytest.FixtureRequest) -> Db:
    """A scenario's database, on MariaDB and on PostgreSQL."""
    return request.getfixturevalue("fault_mysql" if request.param == "mysql" else "fault_pg")
