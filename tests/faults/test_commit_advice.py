"""What mq advises after an enqueue's lost COMMIT cannot store a message twice.

A proxy holds the answer to a keyed enqueue's COMMIT (the server committed) while
a drain runs the message and deletes it; then the connection is cut. PostgreSQL's
commit log still says committed. MariaDB can only look for the row: with the
default ``unique_retention: 0`` the key left with it, so a retry with the same key
would be stored and run again, and mq must not advise one (it names
unique_retention instead); with a retention the tombstone answers the look-up.
Where mq does advise a keyed retry (the COMMIT never reached the server, on a
queue that keeps its keys), following it runs the message once.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Db
from tests.faults.test_ambiguous_enqueue import _target, _through
from tests.proxy import Proxy

pytestmark = pytest.mark.slow

KEY = "held-key-7"
RETRY = "enqueue again with the same unique key"


@pytest.fixture
def ran(tmp_path, monkeypatch):
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _configure(db: Db, retention: str) -> None:
    (db.tmp / "mq.yaml").write_text(
        f"lock_dir: {db.tmp / 'locks'}\n"
        f"queues:\n  jobs: {{handler: 'tests.jobs:record', unique_retention: {retention}}}\n"
    )


def _enqueue(db: Db, url: str):
    env = db.env(MQ_DATABASE_URL=url, MQ_CONFIG=str(db.tmp / "mq.yaml"))
    return db.spawn("enqueue", "-q", "jobs", "--unique-key", KEY, '{"k": 1}', env=env)


def _committed(db: Db) -> bool:
    return bool(db.sql("SELECT id FROM mq_messages WHERE queue = 'jobs'"))


def _follow(db: Db, code: int, err: str) -> None:
    """What a user does with what mq said: retry where it says to."""
    if code == 0:
        return
    assert code == 3, err
    if RETRY in err or "nothing was stored" in err:
        again = db.run("enqueue", "-q", "jobs", "--unique-key", KEY, '{"k": 1}')
        assert again.exit_code == 0, again.output


@pytest.mark.parametrize("retention", ["0", "1h"])
def test_a_held_commit_answer_while_a_drain_runs_the_message(fault_db, ran, retention):
    db: Db = fault_db
    _configure(db, retention)
    proxy = Proxy(_target(db))
    proxy.lose_reply_after(KEY.encode(), commit=True)
    try:
        producer = _enqueue(db, _through(db, proxy.port))
        deadline = time.monotonic() + 30
        while not _committed(db):  # the server committed; its answer is held
            assert time.monotonic() < deadline and producer.poll() is None
            time.sleep(0.05)
        drained = db.run("drain", "-q", "jobs")
        assert drained.exit_code == 0, drained.output
        assert len(ran()) == 1
        proxy.cut()  # the held answer is lost with the connection
        out, err = producer.communicate(timeout=60)
    finally:
        proxy.close()
    stderr = err.decode()
    if db.kind == "postgres" or retention != "0":
        # The commit log (PostgreSQL) or the key's tombstone tells: stored, once.
        assert producer.returncode == 0, stderr
        assert len(out.split()) == 1
    else:
        # MariaDB, no retention: the row and its key are gone; nothing can tell a
        # run message from one never stored, and a keyed retry would be stored.
        assert producer.returncode == 3, stderr
        assert "cannot tell" in stderr and "unique_retention" in stderr, stderr
        assert RETRY not in stderr and "makes a retry safe" not in stderr, stderr
    _follow(db, producer.returncode, stderr)
    assert db.run("drain", "-q", "jobs").exit_code == 0
    assert [r["payload"] for r in ran()] == [{"k": 1}]  # run once


def test_the_advised_keyed_retry_after_a_dropped_commit_runs_the_message_once(fault_db, ran):
    """The COMMIT never reaches the server: MariaDB cannot tell (CommitUnknown) and,
    on a queue that keeps its keys, advises the keyed retry; PostgreSQL knows the
    batch was not stored. Following the words runs the message once."""
    db: Db = fault_db
    _configure(db, "1h")
    proxy = Proxy(_target(db))
    proxy.drop_commits_after(KEY.encode())
    try:
        producer = _enqueue(db, _through(db, proxy.port))
        out, err = producer.communicate(timeout=90)
    finally:
        proxy.close()
    stderr = err.decode()
    assert producer.returncode == 3 and proxy.dropped >= 1, stderr
    if db.kind == "mysql":
        assert "cannot tell" in stderr and RETRY in stderr and "1h" in stderr, stderr
    _follow(db, producer.returncode, stderr)
    assert db.run("drain", "-q", "jobs").exit_code == 0
    assert [r["payload"] for r in ran()] == [{"k": 1}]
