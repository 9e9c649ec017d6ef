"""Slots and wake-ups belong to one database and table (issue 31): two databases, or
two tables of one database, with a queue of the same name, drained by one user on
one host with one lock_dir, share no per-host slot (`concurrency`), no fleet slot
(`max_drains`) and no wake-up FIFO.

Real databases and real drains: database A's drain holds its slots while its
handler waits on a file; B's drain must run as if A's did not exist, and a second
drain of A itself must still find A's slots busy.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mq_cli.core.config import load_config
from mq_cli.core.identity import database_id
from mq_cli.host import slots, wakeup
from tests.conftest import Db, _init, _mysql_database, _pg_database

#: A's message holds its drain (and so its slots) until the test creates a file
SETTINGS = {"handler": "tests.jobs:wait_for_file", "concurrency": 1, "max_drains": 1,
            "batch_size": 1}  # fmt: skip


@pytest.fixture
def other(db: Db, tmp_path: Path) -> Iterator[Db]:
    """A second database of ``db``'s kind: another SQLite file, or another database on
    the same MariaDB or PostgreSQL server."""
    if db.kind == "sqlite":
        (tmp_path / "b").mkdir()
        second = Db("sqlite", f"sqlite:///{tmp_path}/b/mq.db", tmp_path)
        _init(second)
        yield second
        return
    make = _mysql_database if db.kind == "mysql" else _pg_database
    for second in make(tmp_path):
        _init(second)
        yield second


def _config(tmp: Path, name: str, url: str, **extra: str) -> Path:
    """A config of one queue, ``mail``; the default lock_dir unless ``extra`` says."""
    path = tmp / f"{name}.yaml"
    path.write_text(json.dumps({"database": url, "queues": {"mail": SETTINGS}, **extra}))
    return path


def _enqueue(database: Db, config: Path, key: str, until: Path) -> None:
    payload = json.dumps({"k": key, "until": str(until)})
    result = database.run("-c", str(config), "enqueue", "-q", "mail", payload)
    assert result.exit_code == 0, result.output


def _drain(database: Db, config: Path, log: Path) -> subprocess.Popen:
    env = database.env(MQ_TEST_LOG=str(log))
    return database.spawn("-c", str(config), "drain", "-q", "mail", "--json", env=env)


def _report(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=120)
    finally:  # a hung drain (the test failed) must not outlive it
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
    return json.loads(out)


def _status(database: Db, config: Path) -> dict:
    result = database.run("-c", str(config), "status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@contextmanager
def _holding(database: Db, config: Path, log: Path, release: Path) -> Iterator[dict]:
    """A drain of ``database`` running a message that waits for ``release``; inside,
    it holds its per-host and its fleet slot. Yields its report, filled at the end."""
    _enqueue(database, config, "held", release)
    proc = _drain(database, config, log)
    report: dict = {}
    try:
        deadline = time.monotonic() + 60  # only catches a hang
        while not (log.exists() and '"held"' in log.read_text()):
            if proc.poll() is not None:
                pytest.fail(f"the holding drain ended early: {proc.communicate()[1].decode()}")
            assert time.monotonic() < deadline, "the holding drain never started its handler"
            time.sleep(0.02)
        yield report
    finally:
        release.touch()
        ended = _report(proc)  # also when the test failed: no drain outlives it
    report.update(ended)


def _neither_shares_with_the_other(a: Db, a_config: Path, b: Db, b_config: Path, tmp: Path):
    log, go = tmp / "ran.jsonl", tmp / "go"
    go.touch()
    for n in range(3):
        _enqueue(b, b_config, f"b{n}", go)
    with _holding(a, a_config, log, tmp / "release") as held:
        # B's status counts none of A's slots, and shows no drain of its own.
        status = _status(b, b_config)
        assert status["queues"]["mail"]["max_drains"] == {"limit": 1, "in_use": 0}
        assert status["drains"] == []
        assert _status(a, a_config)["queues"]["mail"]["max_drains"] == {"limit": 1, "in_use": 1}

        # B's drain takes B's slots, runs its messages and reports nothing busy.
        report = _report(_drain(b, b_config, log))
        assert report["busy"] == [] and report["succeeded"] == 3, report

        # A second drain of A itself is still refused: the host's slot...
        _enqueue(a, a_config, "a2", go)
        report = _report(_drain(a, a_config, log))
        assert report["busy"] == ["mail"] and report["claimed"] == 0, report
        # ... and, from another lock_dir (as on another host), the fleet's.
        elsewhere = tmp / "a-elsewhere.yaml"
        data = json.loads(a_config.read_text())
        elsewhere.write_text(json.dumps({**data, "lock_dir": str(tmp / "host2-locks")}))
        report = _report(_drain(a, elsewhere, log))
        assert report["busy"] == ["mail"] and report["claimed"] == 0, report
    assert held["succeeded"] == 2 and held["busy"] == []  # then it ran a2 too


def test_two_databases_with_one_queue_name_share_no_slot(db, other, tmp_path):
    a = _config(tmp_path, "a", db.url)
    b = _config(tmp_path, "b", other.url)
    _neither_shares_with_the_other(db, a, other, b, tmp_path)


def test_two_tables_in_one_database_share_no_slot(db, tmp_path):
    a = _config(tmp_path, "a", db.url)
    b = _config(tmp_path, "b", db.url, table="mq_other")
    assert db.run("-c", str(b), "init").exit_code == 0
    _neither_shares_with_the_other(db, a, db, b, tmp_path)


def test_an_enqueue_wakes_waiting_drains_of_its_own_database_only(db, other, tmp_path):
    a = _config(tmp_path, "a", db.url)
    b = _config(tmp_path, "b", other.url)
    # What a waiting drain of B makes (drain/loop.py), under the same lock_dir as A's.
    b_dir = slots.open_database_dir(load_config(str(b)))
    waiter = wakeup.Waiter(b_dir, "mail")
    try:
        _enqueue(db, a, "a1", tmp_path)
        assert not waiter.wait(0.2)  # A's enqueue is nothing to B
        _enqueue(other, b, "b1", tmp_path)
        assert waiter.wait(10)
    finally:
        waiter.close()


def test_lock_files_are_in_a_directory_per_database_that_names_it(tmp_path):
    (tmp_path / "mq.yaml").write_text(
        f"database: mysql://mq:hunter2@DB1.example:3306/app\nlock_dir: {tmp_path / 'locks'}\n"
    )  # no server needed: nothing connects
    config = load_config()
    path = slots.open_database_dir(config)
    assert path == str(tmp_path / "locks" / f"db-{database_id(config.database, 'mq_messages')}")
    about = Path(path, "database").read_text()
    assert "db1.example" in about.lower() and "/app" in about and "mq_messages" in about
    assert "hunter2" not in about
    slot = slots.acquire(path, "mail", 1)
    assert slot is not None and slot.path == f"{path}/mail.0.lock"
    slot.release()
    # Made and checked like the lock_dir itself.
    assert oct(Path(path).stat().st_mode & 0o777) == "0o700"


def test_mq_check_names_the_database_directory(sqlite_db, tmp_path):
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("check")
    line = next(x for x in result.stdout.splitlines() if "lock_dir" in x)
    assert line.startswith("ok") and "this database's slots: " in line and "/db-" in line


def _settings(url: str, table: str = "mq_messages") -> str:
    from mq_cli.core.dburl import parse_database_url

    return database_id(parse_database_url(url), table)


def test_the_identity_is_the_database_and_table_never_the_credentials(tmp_path, monkeypatch):
    base = _settings("mysql://mq:secret@db1:3306/app")
    assert len(base) == 12 and set(base) <= set("0123456789abcdef")
    # Who connects, and with which password, is not which database it is.
    assert _settings("mysql://other:different@db1:3306/app") == base
    assert _settings("mariadb://mq@DB1:3306/app") == base
    for url in (
        "mysql://mq@db2:3306/app",
        "mysql://mq@db1:3307/app",
        "mysql://mq@db1:3306/app2",
        "mysql://mq@db1/app?unix_socket=/run/mysqld/mysqld.sock",
        "postgresql://mq@db1:3306/app",
    ):
        assert _settings(url) != base, url
    assert _settings("mysql://mq@db1:3306/app", "mq_other") != base
    several = "postgresql://mq@h1:5432,h2:5433/app?target_session_attrs=read-write"
    assert _settings(several) == _settings("postgresql://mq@h2:5433,h1:5432/app")
    assert _settings(several) != _settings("postgresql://mq@h1:5432/app")
    # SQLite: the file, however the URL spells it (relative, through a symlink).
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(real)
    same = {
        _settings("sqlite:///mq.db"),
        _settings(f"sqlite:///{real}/mq.db"),
        _settings(f"sqlite:///{tmp_path}/link/mq.db"),
    }
    assert len(same) == 1
    assert _settings(f"sqlite:///{tmp_path}/other.db") not in same


def test_fleet_lock_names_fit_mariadb_and_carry_the_database():
    from mq_cli.backends.liveness import lock_name
    from mq_cli.host.fleet import slot_token

    names = {lock_name(slot_token(scope, "q" * 64, 999)) for scope in ("a/t", "b/t", "t")}
    assert len(names) == 3 and all(len(name) <= 64 for name in names)
