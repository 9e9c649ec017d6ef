"""Engines named from their own banners (backends/engines.py): the verdict on each
recorded banner, and a refused engine end to end (exit 3, one `mq:` line)."""

from __future__ import annotations

import re

import pytest

from mq_cli.backends.engines import mysql_engine, postgres_engine
from mq_cli.backends.sqlfiles import load_queries
from mq_cli.core.errors import EngineRefused
from tests.conftest import _pg_connect

# (VERSION(), @@version_comment, a Galera node, engine, accepted)
MYSQL_BANNERS = [
    ("8.0.11-TiDB-v7.5.1",
     "TiDB Server (Apache License 2.0) Community Edition, MySQL 8.0 compatible",
     False, "TiDB", False),
    ("5.7.25-TiDB-v6.5.0", "TiDB Server (Apache License 2.0) Community Edition, MySQL 5.7 "
     "compatible", False, "TiDB", False),
    ("8.0.30-Vitess", "", False, "Vitess", False),
    ("8.0.30-Vitess", "Vitess 17.0.3 (Git revision 8ac1a3b)", False, "Vitess", False),
    ("8.0.30-Vitess", "Vitess 19.0.4 (Git revision a9d5e7c)", False, "Vitess 19", True),
    ("10.11.6-MariaDB-0+deb12u1", "Debian 12", False, "MariaDB", True),
    ("10.6.16-MariaDB-log", "MariaDB Server", True, "MariaDB Galera node", True),
    ("8.0.36", "MySQL Community Server - GPL", False, "MySQL", True),
    ("8.0.35-0ubuntu0.22.04.1", "(Ubuntu)", False, "MySQL", True),
]  # fmt: skip

PG15 = (
    "PostgreSQL 15.5 (Debian 15.5-1.pgdg120+1) on x86_64-pc-linux-gnu, "
    "compiled by gcc (Debian 12.2.0-14) 12.2.0, 64-bit"
)
COCKROACH = "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)"
# version(), server_version_num, citus installed, mq's table distributed, engine, accepted
PG_BANNERS = [
    (PG15, 150005, False, False, "PostgreSQL", True),
    (COCKROACH, 130000, False, False, "CockroachDB", False),
    ("PostgreSQL 11.2-YB-2.18.0.0-b0 on x86_64-pc-linux-gnu, compiled by clang version "
     "15.0.3 (https://github.com/yugabyte/llvm-project.git 0b8d1183), 64-bit",
     110002, False, False, "YugabyteDB", False),
    ("PostgreSQL 16.1 (Debian 16.1-1.pgdg120+1) on x86_64-pc-linux-gnu, compiled by gcc, "
     "64-bit", 160001, True, False, "PostgreSQL with Citus", True),
    ("PostgreSQL 16.1 (Debian 16.1-1.pgdg120+1) on x86_64-pc-linux-gnu, compiled by gcc, "
     "64-bit", 160001, True, True, "PostgreSQL with Citus", False),
    ("PostgreSQL 11.22 on x86_64-pc-linux-gnu, compiled by gcc, 64-bit", 110022, False, False,
     "PostgreSQL 11", False),
]  # fmt: skip


@pytest.mark.parametrize("version, comment, galera, name, accepted", MYSQL_BANNERS)
def test_mysql_banners(version, comment, galera, name, accepted):
    engine = mysql_engine(version, comment, galera, "MariaDB" if "MariaDB" in version else "MySQL")
    assert (engine.name, engine.accepted) == (name, accepted)
    if accepted:
        engine.refuse("db1:3306")  # raises nothing
    else:
        with pytest.raises(EngineRefused, match=f"db1:3306 runs {name}: ") as caught:
            engine.refuse("db1:3306")
        assert caught.value.exit_code == 3


@pytest.mark.parametrize("version, number, citus, distributed, name, accepted", PG_BANNERS)
def test_postgres_banners(version, number, citus, distributed, name, accepted):
    engine = postgres_engine(version, number, citus, distributed)
    assert (engine.name, engine.accepted) == (name, accepted)


def test_refusals_say_what_is_unsupported_and_why():
    assert "non-locking read" in mysql_engine("8.0.11-TiDB-v7.5.1").detail
    assert "SKIP LOCKED only from 19" in mysql_engine("8.0.30-Vitess").detail
    cockroach = postgres_engine(COCKROACH, 130000).detail
    assert "no advisory locks" in cockroach and "no LISTEN" in cockroach
    assert "blocking lock" in postgres_engine("PostgreSQL 11.2-YB-2.18.0.0-b0", 110002).detail
    assert "single-shard" in postgres_engine(PG15, 150005, True, True).detail
    assert "as PostgreSQL" in postgres_engine(PG15, 150005, True, False).detail


def test_check_names_the_engine(db):
    result = db.run("check")
    assert result.exit_code == 0, result.output
    if db.kind == "postgres":
        assert "engine" in result.output and "PostgreSQL: supported" in result.output
    if db.kind == "mysql":
        assert "MariaDB: supported" in result.output or "MySQL: supported" in result.output


def test_a_refused_engine_exits_3_with_one_line(pg_db, monkeypatch):
    """The whole path from CockroachDB's banner to exit 3 on a real server; only the
    banner is made up (the engine statement reads a literal). A schema before
    pg_catalog cannot make it up: mq calls pg_catalog.version() (issue 31)."""
    name = pg_db.url.rsplit("/", 1)[1].split("?")[0]
    with _pg_connect(pg_db.url) as conn:
        conn.execute("CREATE SCHEMA banner")
        conn.execute(
            "CREATE FUNCTION banner.version() RETURNS text LANGUAGE sql "
            f"AS $$ SELECT '{COCKROACH}'::text $$"
        )
        conn.execute(f'ALTER DATABASE "{name}" SET search_path = banner, pg_catalog, public')
    check = pg_db.run("check")
    assert "engine" in check.stdout and "PostgreSQL: supported" in check.stdout, check.output
    assert re.search(r"warn\s+search_path\s+banner before pg_catalog", check.stdout), check.stdout
    banner = f"SELECT '{COCKROACH}'::pg_catalog.text, 130000, false"
    monkeypatch.setitem(load_queries("postgres"), "engine", banner)
    result = pg_db.run("stats")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("mq: ") and "runs CockroachDB: " in result.stderr
    assert "no advisory locks" in result.stderr and "Traceback" not in result.output
    result = pg_db.run("check")
    assert result.exit_code == 1, result.output
    assert "runs CockroachDB" in result.output and "Traceback" not in result.output
