"""A producer knows whether its batch was stored.

The connection is lost at the enqueue's COMMIT: the server committed (or not),
and its answer never reached mq. A producer that retries on the error would
store the batch twice; one that does not would lose it when the commit had
failed. mq finds out: the batch's ids when it was stored, stored once when it
was not, and a distinct error (saying which retry is safe) where it cannot tell.
"""

from __future__ import annotations

import json

import pytest

from mq_cli.api import connect
from mq_cli.core.dburl import parse_database_url
from tests.conftest import Db
from tests.faults.test_ambiguous_commits import ReplyEater

pytestmark = pytest.mark.slow

BATCHES = 40


def _through(db: Db, port: int) -> str:
    s = parse_database_url(db.url)
    scheme = "mysql" if db.kind == "mysql" else "postgresql"
    user = s.user or ("root" if db.kind == "mysql" else "postgres")
    return f"{scheme}://{user}@127.0.0.1:{port}/{s.database}"


def _target(db: Db) -> tuple[str, int]:
    s = parse_database_url(db.url)
    return (s.host or "127.0.0.1", s.port or (3306 if db.kind == "mysql" else 5432))


def _commit(db: Db) -> bytes:
    """The COMMIT statement as it travels (not SET AUTOCOMMIT): MySQL's COM_QUERY
    byte before it, PostgreSQL's NUL after it."""
    return b"\x03COMMIT" if db.kind == "mysql" else b"COMMIT\x00"


def _stored(db: Db) -> list[object]:
    rows = db.sql("SELECT payload FROM mq_messages ORDER BY id")
    return [json.loads(bytes(r[0])) for r in rows]


def _key(message: object) -> str:
    return json.dumps(message, sort_keys=True)


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_a_batch_whose_commit_reply_is_lost_is_stored_once_and_its_ids_returned(
    backend, request, tmp_path
):
    db: Db = request.getfixturevalue("fault_mysql" if backend == "mysql" else "fault_pg")
    # The COMMIT goes to the server, which commits; its answer is swallowed and the
    # connection dropped. Every batch: BATCHES of them, 5 messages each.
    eater = ReplyEater(_target(db), _commit(db), settle=0.2)
    expected: list[object] = []
    mq = connect(database=_through(db, eater.port))
    try:
        for n in range(BATCHES):
            eater.armed = True
            batch = [{"batch": n, "i": i} for i in range(5)]
            ids = mq.enqueue_many("jobs", batch)
            assert len(ids) == 5 and all(isinstance(i, int) for i in ids), ids
            expected += batch
            stored = dict(db.sql("SELECT id, queue FROM mq_messages"))
            assert set(ids) <= set(stored), (n, ids)
    finally:
        mq.close()
        eater.close()
    assert eater.fired == BATCHES
    stored = _stored(db)
    assert sorted(map(_key, stored)) == sorted(map(_key, expected))  # none twice, none lost


def test_a_batch_whose_insert_was_cut_before_the_commit_is_stored_once(fault_pg, tmp_path):
    """The answer to the INSERT is lost and the connection dropped: the server rolls
    the transaction back, so mq stores the batch (once) on a new connection."""
    db = fault_pg
    eater = ReplyEater(_target(db), b"INSERT", settle=0.2)
    mq = connect(database=_through(db, eater.port))
    try:
        ids = mq.enqueue_many("jobs", [{"i": 1}, {"i": 2}])
    finally:
        mq.close()
        eater.close()
    assert eater.fired == 1
    assert len(ids) == 2 and sorted(ids) == sorted(
        r[0] for r in db.sql("SELECT id FROM mq_messages")
    )
    assert sorted(map(_key, _stored(db))) == [_key({"i": 1}), _key({"i": 2})]


def test_the_cli_enqueue_reports_a_stored_batch_after_a_lost_commit_reply(fault_pg, tmp_path):
    db = fault_pg
    eater = ReplyEater(_target(db), _commit(db), settle=0.2)
    try:
        result = db.run(
            "enqueue", "-q", "jobs", '{"a": 1}', env={"MQ_DATABASE_URL": _through(db, eater.port)}
        )
    finally:
        eater.close()
    assert result.exit_code == 0, result.output
    (ident,) = [int(x) for x in result.stdout.split()]
    assert db.sql("SELECT id FROM mq_messages") == [(ident,)]
