"""A drain whose database refuses an acknowledgement mid-batch (a deadlock that
outlives its retries, as Galera's certification conflicts can): it exits 3,
and no message that already ran is given back to run again at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    return lambda: [json.loads(x)["payload"]["n"] for x in log.read_text().splitlines()]


def refuse_deleting(db, ident: int) -> None:
    """A trigger makes the acknowledgement (DELETE) of one message fail."""
    if db.kind == "sqlite":
        db.sql(
            f"CREATE TRIGGER refuse BEFORE DELETE ON mq_messages WHEN OLD.id = {ident} "
            "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END"
        )
    elif db.kind == "postgres":
        # 40001 (serialization failure) is retried like a deadlock.
        db.sql(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF OLD.id = {ident} THEN RAISE EXCEPTION 'could not serialize (test trigger)' "
            "USING ERRCODE = '40001'; END IF; RETURN OLD; END $$"
        )
        db.sql(
            "CREATE TRIGGER refuse BEFORE DELETE ON mq_messages FOR EACH ROW "
            "EXECUTE FUNCTION refuse()"
        )
    else:
        # 1213 is what Galera reports for a lost certification: mq retries it.
        db.sql(
            "CREATE TRIGGER refuse BEFORE DELETE ON mq_messages FOR EACH ROW "
            f"IF OLD.id = {ident} THEN SIGNAL SQLSTATE '40001' "
            "SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (test trigger)'; END IF"
        )


def test_a_refused_ack_gives_back_only_what_never_ran(db, ran):
    result = db.run("enqueue", "-q", "jobs", *[json.dumps({"n": i}) for i in range(10)])
    ids = [int(x) for x in result.stdout.split()]
    refuse_deleting(db, ids[3])
    drain = db.spawn("drain", "-q", "jobs", "--handler", "tests.jobs:record", "--batch-size", "10")
    _, err = drain.communicate(timeout=120)
    assert drain.returncode == 3, err
    assert b"Traceback" not in err
    done = ran()
    assert sorted(done) == sorted(set(done)), "a message ran twice within one drain"
    # The worker runs messages ahead of their acknowledgements: whatever ran and
    # was not acknowledged must stay processing (gc takes it back), not ready.
    states = dict(db.sql("SELECT id, status FROM mq_messages"))
    for n, ident in enumerate(ids):
        if n in done and ident in states:
            assert states[ident] == "processing", (n, states)
        elif ident in states:
            assert states[ident] == "ready", (n, states)
    assert ids[3] in states and states[ids[3]] == "processing"
    if any(n > 3 for n in done):
        assert b"could not be recorded" in err
    # A second drain runs only what never ran: nothing twice.
    again = db.spawn("drain", "-q", "jobs", "--handler", "tests.jobs:record")
    again.communicate(timeout=120)
    everything = ran()
    assert len(everything) == len(set(everything)), sorted(everything)
