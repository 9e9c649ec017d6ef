"""`mq init` is safe from many hosts at once (issue 31): a deployment that runs it on
every host starts it on all of them together, on a fresh database or on one whose
schema a new release migrates. Every init exits 0, one of them does the work, and
the schema is whole afterwards (backends/sqlschema.py: one transaction behind an
advisory lock on PostgreSQL, GET_LOCK on MariaDB, BEGIN IMMEDIATE on SQLite).

Real processes (`python -m mq_cli init`), as many as the hosts of a fleet, on a
fresh database per test.
"""

from __future__ import annotations

import threading

from mq_cli.backends import open_backend
from mq_cli.backends.schema import verify
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.version import SCHEMA_VERSION
from tests.conftest import Db, _pg_database, _pg_problem, cannot_run_here
from tests.pooler import pgbouncer_unavailable

#: inits started together
INITS = 24


def inits_at_once(db: Db) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of INITS `mq init` processes started together."""
    processes = [db.spawn("init") for _ in range(INITS)]
    done = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        done.append((process.returncode, out.decode(), err.decode()))
    return done


def assert_whole(db: Db) -> None:
    with open_backend(parse_database_url(db.url), "mq_messages", create=False) as backend:
        verify(backend)  # every column and index, the run log's and the limits' tables
        assert backend.schema_version() == SCHEMA_VERSION
        assert not backend.runlog_access() and not backend.limits_missing()
    assert db.run("enqueue", "-q", "q", "1").exit_code == 0
    assert db.run("drain", "-q", "q", "--handler", "tests.jobs:record").exit_code == 0


def test_many_inits_at_once_on_a_fresh_database(fresh_db: Db):
    done = inits_at_once(fresh_db)
    assert [status for status, _, _ in done] == [0] * INITS, [e for s, _, e in done if s]
    created = [out for _, out, _ in done if "created table mq_messages" in out]
    assert len(created) == 1, created
    assert_whole(fresh_db)


def test_many_inits_at_once_through_a_transaction_pooler(pgbouncers, tmp_path):
    """Each init is one transaction, its lock transaction-scoped: through PgBouncer in
    transaction mode (8 server connections for 24 clients) it holds as direct."""
    reason = _pg_problem or pgbouncer_unavailable()
    if reason:
        cannot_run_here(reason)
    for direct in _pg_database(tmp_path):
        name = parse_database_url(direct.url).database or ""
        pooled = Db("postgres", pgbouncers["transaction"].url(name), tmp_path)
        done = inits_at_once(pooled)
        assert [status for status, _, _ in done] == [0] * INITS, [e for s, _, e in done if s]
        created = [out for _, out, _ in done if "created table mq_messages" in out]
        assert len(created) == 1, created
        assert_whole(direct)


def drop_index(db: Db, name: str) -> None:
    if db.kind == "mysql":
        db.sql(f"ALTER TABLE mq_messages DROP INDEX `{name}`")
    else:
        db.sql(f'DROP INDEX "{name}"')


def make_version_2(db: Db) -> None:
    """A version 2 table (no run log, no due index) that also lost a column: every
    init has DDL to run, each statement one another init could race."""
    assert db.run("init").exit_code == 0
    assert db.run("enqueue", "-q", "q", "--delay", "1h", "1").exit_code == 0
    drop_index(db, "mq_messages_due")
    db.sql("UPDATE mq_messages SET status = 'ready' WHERE status = 'delayed'")
    for table in ("mq_messages_runs", "mq_messages_rollup", "mq_messages_slots"):
        db.sql(f"DROP TABLE {table}")
    db.sql("ALTER TABLE mq_messages DROP COLUMN last_error")
    db.sql("UPDATE mq_messages_meta SET value = '2' WHERE name = 'schema_version'")


def test_many_inits_at_once_migrate_an_older_schema_once(fresh_db: Db):
    make_version_2(fresh_db)
    done = inits_at_once(fresh_db)
    assert [status for status, _, _ in done] == [0] * INITS, [e for s, _, e in done if s]
    migrated = [out for _, out, _ in done if "migrated 2 -> 3" in out]
    assert len(migrated) == 1, migrated
    assert "restored column last_error" in migrated[0]
    assert fresh_db.sql("SELECT status FROM mq_messages") == [("delayed",)]
    assert_whole(fresh_db)


def test_without_a_lock_inits_that_lose_a_race_look_again(mysql_db: Db):
    """Galera refuses GET_LOCK: there, an init whose DDL another node's init ran
    first (a column or an index that exists now) reads the schema again and goes on."""
    make_version_2(mysql_db)
    settings = parse_database_url(mysql_db.url)
    results: list[object] = []

    def init() -> None:
        with open_backend(settings, "mq_messages", create=False) as backend:
            backend._sql = {**backend._sql, "init_lock": "SELECT no_such_lock(%s, %s)"}  # type: ignore[attr-defined]
            try:
                results.append(backend.init_schema())
            except Exception as exc:  # noqa: BLE001 - the test reports it
                results.append(exc)

    threads = [threading.Thread(target=init) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(isinstance(done, list) for done in results), results
    assert len(results) == 8
    assert_whole(mysql_db)
