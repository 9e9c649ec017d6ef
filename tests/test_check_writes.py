"""`mq check` fails when every write would fail, or the SQLite file is damaged.

Reachable and readable was not enough: a 0444 SQLite file, a read-only server
or a user without INSERT passed `mq check` and then failed every enqueue and
every drain's acknowledgement.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

from mq_cli.core.dburl import parse_database_url


def failed(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("FAIL")]


def test_a_good_database_passes_and_the_probe_leaves_nothing(db):
    assert db.run("enqueue", "-q", "jobs", "1").exit_code == 0
    result = db.run("check")
    assert result.exit_code == 0, result.output
    assert re.search(r"ok\s+writable", result.stdout)
    if db.kind == "sqlite":
        assert re.search(r"ok\s+integrity\s+PRAGMA quick_check ok", result.stdout)
    assert db.sql("SELECT id, queue FROM mq_messages") == [(1, "jobs")]


def test_a_read_only_sqlite_file_fails_the_check(sqlite_db, tmp_path):
    assert sqlite_db.run("enqueue", "-q", "jobs", "1").exit_code == 0
    path = tmp_path / "mq.db"
    for file in tmp_path.glob("mq.db*"):
        file.chmod(0o444)
    # root writes a 0444 file anyway: drop the capability that lets it, as a
    # real service user would lack it.
    prefix = []
    if os.geteuid() == 0:
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    env = sqlite_db.env()

    def mq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "mq_cli", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    try:
        enqueue = mq("enqueue", "-q", "jobs", "2")
        assert enqueue.returncode == 3, enqueue  # what the check must foresee
        result = mq("check")
        assert result.returncode == 1, result
        lines = failed(result.stdout)
        assert len(lines) == 1 and "writable" in lines[0], result.stdout
        assert "readonly" in lines[0]
    finally:
        for file in tmp_path.glob("mq.db*"):
            file.chmod(0o644)
    assert path.exists()


def test_a_corrupted_sqlite_page_fails_the_check(sqlite_db, tmp_path):
    payloads = "".join(f'{{"n": {i}, "pad": "{"x" * 200}"}}\n' for i in range(2000))
    assert sqlite_db.run("enqueue", "-q", "jobs", "--lines", input=payloads).exit_code == 0
    sqlite_db.sql("PRAGMA wal_checkpoint(TRUNCATE)")
    path = tmp_path / "mq.db"
    data = bytearray(path.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle + 8 : middle + page - 8] = os.urandom(page - 16)
    path.write_bytes(bytes(data))

    result = sqlite_db.run("check")
    assert result.exit_code == 1, result.output
    lines = failed(result.stdout)
    assert len(lines) == 1 and "integrity" in lines[0], result.stdout
    assert "backup" in lines[0]


def test_a_mariadb_user_without_insert_fails_the_check(mysql_db):
    assert mysql_db.run("init").exit_code == 0
    s = parse_database_url(mysql_db.url)
    user = f"mqro_{uuid.uuid4().hex[:8]}"
    mysql_db.sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-ro'")
    try:
        mysql_db.sql(f"GRANT SELECT ON `{s.database}`.* TO '{user}'@'%'")
        url = f"mysql://{user}:pw-ro@{s.host}:{s.port}/{s.database}"
        as_reader = type(mysql_db)("mysql", url, mysql_db.tmp)
        assert as_reader.run("enqueue", "-q", "jobs", "1").exit_code == 3
        result = as_reader.run("check")
        assert result.exit_code == 1, result.output
        lines = failed(result.stdout)
        assert len(lines) == 1 and "writable" in lines[0], result.stdout
        assert "pw-ro" not in result.output
    finally:
        mysql_db.sql(f"DROP USER IF EXISTS '{user}'@'%'")
