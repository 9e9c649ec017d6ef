"""What only the PostgreSQL backend has: the driver as an extra, its URL forms, the
storage parameters of a delete-heavy table, and `mq check`'s vacuum warnings."""

from __future__ import annotations

import re
import threading

import pytest
from click.testing import CliRunner

import mq_cli.backends.postgres.dialect as pg
from mq_cli.backends import bloat
from mq_cli.backends.postgres import schema as pg_schema
from mq_cli.cli.main import cli
from mq_cli.core.dburl import parse_database_url
from tests.conftest import _pg_connect


def mq(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"MQ_CONFIG": None})


def test_without_psycopg_a_postgresql_url_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pg, "psycopg", None)
    result = mq("-d", "postgresql://mq:s3cret@127.0.0.1:5432/app", "enqueue", "-q", "q", "{}")
    assert result.exit_code == 2, result.output
    assert "pip install 'mq-cli[postgres]'" in result.stderr
    assert "s3cret" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "url, host, socket, port, user, database",
    [
        ("postgresql://mq:pw@db1:5433/app", "db1", None, 5433, "mq", "app"),
        ("postgres://mq@db1/app", "db1", None, 5432, "mq", "app"),
        ("postgresql://mq@/app?host=/var/run/postgresql", "127.0.0.1", "/var/run/postgresql",
         5432, "mq", "app"),
    ],
)  # fmt: skip
def test_url_forms(url, host, socket, port, user, database):
    s = parse_database_url(url)
    assert (s.kind, s.host, s.unix_socket, s.port, s.user, s.database) == (
        "postgres", host, socket, port, user, database,
    )  # fmt: skip
    assert "pw" not in s.describe() and s.describe().startswith("postgresql://mq@")


def test_sslmode_in_the_url_and_the_mapping(tmp_path):
    assert parse_database_url("postgresql://h/app?sslmode=verify-full").sslmode == "verify-full"
    (tmp_path / "mq.yaml").write_text(
        "database:\n  kind: postgresql\n  host: db1\n  database: app\n  user: mq\n"
        "  password_env: PGPW_TEST\n  sslmode: require\n"
    )
    import os

    from mq_cli.core.config import load_config

    os.environ["PGPW_TEST"] = "hunter2"
    try:
        settings = load_config(str(tmp_path / "mq.yaml")).database
    finally:
        del os.environ["PGPW_TEST"]
    assert (settings.kind, settings.port, settings.sslmode) == ("postgres", 5432, "require")
    assert settings.password == "hunter2" and "hunter2" not in settings.describe()
    assert "hunter2" not in repr(settings)


def test_init_sets_the_storage_parameters_and_restores_them(pg_db):
    assert pg_db.run("init").exit_code == 0
    (options,) = pg_db.sql("SELECT reloptions FROM pg_class WHERE relname = 'mq_messages'")[0]
    assert sorted(options) == sorted(f"{k}={v}" for k, v in pg_schema.STORAGE.items())
    pg_db.sql("ALTER TABLE mq_messages RESET (fillfactor)")
    result = pg_db.run("init")
    assert result.exit_code == 0, result.output
    assert "storage parameters" in result.stdout
    (options,) = pg_db.sql("SELECT reloptions FROM pg_class WHERE relname = 'mq_messages'")[0]
    assert "fillfactor=70" in options
    assert "storage parameters" not in pg_db.run("init").stdout  # idempotent
    printed = pg_db.run("init", "--print-sql").stdout
    assert "autovacuum_vacuum_scale_factor = 0.01" in printed


def test_unique_keys_are_bytes_exact(db):
    for key in ("k", "k ", "K", "é", "e\u0301"):
        result = db.run("enqueue", "-q", "q", "--unique-key", key, "1")
        assert result.exit_code == 0 and result.stdout.strip(), (key, result.output)
    assert db.run("enqueue", "-q", "q", "--unique-key", "k ", "1").stdout.strip() == ""
    assert len(db.sql("SELECT id FROM mq_messages")) == 5


def test_check_fails_on_a_long_transaction(pg_db, monkeypatch):
    assert pg_db.run("init").exit_code == 0
    assert re.search(r"ok\s+transactions", pg_db.run("check").stdout)
    monkeypatch.setattr(pg, "LONG_TRANSACTION", 0.2)
    other = _pg_connect(pg_db.url, autocommit=False)
    ours = f"(pid {other.info.backend_pid},"
    try:
        other.execute("SELECT 1")  # opens the transaction, then idles in it
        threading.Event().wait(0.5)
        # The check names the server's oldest transaction: on the shared server another
        # test's may be older for a moment; ours outlives those.
        for _ in range(100):
            result = pg_db.run("check")
            if ours in result.stdout:
                break
            threading.Event().wait(0.1)
    finally:
        other.rollback()
        other.close()
    assert result.exit_code == 1, result.output
    assert re.search(r"transactions\s+a transaction has been open for", result.stdout)
    assert ours in result.stdout
    assert "idle in transaction" in result.stdout


def test_check_fails_when_dead_rows_pile_up(pg_db, monkeypatch):
    assert pg_db.run("init").exit_code == 0
    pg_db.sql("ALTER TABLE mq_messages SET (autovacuum_enabled = false)")
    result = pg_db.run("enqueue", "-q", "q", "--lines", "--silent", input="1\n" * 3000)
    assert result.exit_code == 0, result.output
    pg_db.sql("DELETE FROM mq_messages WHERE id % 10 <> 0")
    monkeypatch.setattr(bloat, "DEAD_ROWS", 100)
    for _ in range(50):  # the statistics collector reports a moment later
        rows = pg_db.sql("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'mq_messages'")
        if rows and rows[0][0] > 1000:
            break
        threading.Event().wait(0.1)
    result = pg_db.run("check")
    assert result.exit_code == 1, result.output
    assert re.search(r"dead rows\s+table mq_messages \(.*\) holds \d+ dead", result.stdout)
    assert "last vacuumed never" in result.stdout
    assert "autovacuum is off for it" in result.stdout
    pg_db.sql("VACUUM mq_messages")
    threading.Event().wait(0.5)
    assert re.search(r"ok\s+dead rows", pg_db.run("check").stdout)
