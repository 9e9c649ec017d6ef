"""The storage contract of claims and acknowledgements, on both backends."""

from __future__ import annotations

import threading
import time
from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest

from mq_cli.backends import open_backend
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ClaimUnknown
from mq_cli.core.models import Message


def backend_for(db):
    return open_backend(parse_database_url(db.url), "mq_messages")


def fill(backend, queue: str, count: int, **kw) -> list[int]:
    ids: list[int] = []
    payloads = [f'{{"n": {i}}}'.encode() for i in range(count)]
    for start in range(0, count, 1000):
        ids += backend.enqueue(queue, payloads[start : start + 1000], **kw)
    return ids


def test_a_claimed_message_is_the_message_its_constructor_makes(db):
    # claims.claimed() builds them without the frozen dataclass's __init__.
    with backend_for(db) as b:
        fill(b, "q", 1, unique_key="k")
        (got,) = b.claim("q", 1, "host:1:aa")
    made = Message(
        id=got.id,
        queue="q",
        status="processing",
        priority=0,
        error_count=0,
        created_at=got.created_at,
        available_at=got.available_at,
        payload=b'{"n": 0}',
        unique_key="k",
        owner="host:1:aa",
    )
    assert got == made and vars(got) == vars(made)
    assert got.created_at.utcoffset() == timedelta(0)
    with pytest.raises(FrozenInstanceError):
        got.status = "ready"  # type: ignore[misc]


def test_a_grouped_claim_lost_while_topping_up_says_it_may_hold_rows(pg_db, monkeypatch):
    # PostgreSQL's group_ack claim (the group's DELETE and the claim in one statement)
    # took rows and committed; it came back short, and the promotion that tops it up
    # finds the session gone. The drain must learn it may hold rows (ClaimUnknown:
    # exit 3, with `mq gc --stalled --requeue`), not that the claim took nothing.
    assert pg_db.run("init").exit_code == 0
    with backend_for(pg_db) as b:
        ids = fill(b, "q", 3)
        (first,) = b.claim("q", 1, "me")  # a success whose DELETE goes with the next claim
        promote = b.promote

        def promote_on_a_lost_session(queue: str) -> int:
            pid = b.conn.info.backend_pid
            pg_db.sql("SELECT pg_terminate_backend(%s)", (pid,))
            return promote(queue)

        monkeypatch.setattr(b, "_promote_due", lambda queue: False)
        monkeypatch.setattr(b, "promote", promote_on_a_lost_session)
        with pytest.raises(ClaimUnknown):
            b.claim_acking("q", 10, "me", [first.id])
    held = pg_db.sql("SELECT id, status, owner FROM mq_messages ORDER BY id")
    assert held == [(ids[1], "processing", "me"), (ids[2], "processing", "me")]


def test_claim_marks_processing_with_owner_and_heartbeat(db):
    with backend_for(db) as b:
        ids = fill(b, "q", 5)
        claimed = b.claim("q", 3, "host:1:aa")
        assert [m.id for m in claimed] == ids[:3]
        assert all(m.payload == f'{{"n": {i}}}'.encode() for i, m in enumerate(claimed))
        got = db.sql(
            "SELECT id, status, owner, heartbeat_at IS NOT NULL FROM mq_messages ORDER BY id"
        )
        assert [tuple(r[1:]) for r in got[:3]] == [("processing", "host:1:aa", 1)] * 3
        assert [tuple(r[1:]) for r in got[3:]] == [("ready", None, 0)] * 2
        assert [m.id for m in b.claim("q", 10, "host:2:bb")] == ids[3:]
        assert b.claim("q", 10, "host:3:cc") == []


def test_acknowledgements_are_guarded_by_the_owner(db):
    with backend_for(db) as b:
        (ident,) = fill(b, "q", 1)
        (mine,) = b.claim("q", 1, "drain-a")
        # an operator requeues it and another drain claims it
        db.sql("UPDATE mq_messages SET status = 'ready', owner = NULL WHERE id = %s", (ident,))
        (theirs,) = b.claim("q", 1, "drain-b")
        assert theirs.id == ident
        assert b.ack_success(mine, "drain-a") is False
        assert b.ack_failure(mine, "drain-a", "boom", 10, False) is False
        assert b.heartbeat([ident], "drain-a") == 0
        assert b.release([ident], "drain-a") == 0
        assert db.sql("SELECT status, owner, error_count FROM mq_messages") == [
            ("processing", "drain-b", 0)
        ]
        assert b.ack_success(theirs, "drain-b") is True
        assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_release_keeps_the_place_in_line(db):
    with backend_for(db) as b:
        ids = fill(b, "q", 3)
        claimed = b.claim("q", 2, "me")
        assert b.release([m.id for m in claimed], "me") == 2
        assert [m.id for m in b.claim("q", 3, "me")] == ids


def test_failure_backoff_and_failed_state(db):
    with backend_for(db) as b:
        fill(b, "q", 2)
        first, second = b.claim("q", 2, "me")
        assert b.ack_failure(first, "me", "boom", 3600, False)
        assert b.ack_failure(second, "me", "gave up", 0, True)
        got = db.sql("SELECT status, error_count, last_error, owner FROM mq_messages ORDER BY id")
        # Stored 'delayed' while in its backoff (schema 4): users see it as ready.
        assert got == [("delayed", 1, "boom", None), ("failed", 1, "gave up", None)]
        assert b.claim("q", 5, "me") == []  # one backs off an hour, one is failed


def test_batch_acknowledgement(db):
    with backend_for(db) as b:
        fill(b, "q", 4)
        claimed = b.claim("q", 4, "me")
        assert b.ack_success_many([m.id for m in claimed], "me") == 4
        assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_parallel_claims_never_share_a_message(db):
    """Four connections claiming at once: every message exactly once."""
    with backend_for(db) as b:
        ids = fill(b, "q", 600)
    taken: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        mine: list[int] = []
        with backend_for(db) as own:
            while batch := own.claim("q", 7, name):
                mine += [m.id for m in batch]
                for m in batch:
                    assert own.ack_success(m, name)
        taken[name] = mine

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(i for got in taken.values() for i in got)
    assert everything == ids


def _raw_transaction(db):
    """A connection of its own with a transaction open (MariaDB or PostgreSQL)."""
    if db.kind == "postgres":
        from tests.conftest import _pg_connect

        return _pg_connect(db.url, autocommit=False)
    import pymysql

    s = parse_database_url(db.url)
    conn = pymysql.connect(
        host=s.host, port=s.port, user=s.user or "root", password=s.password or "",
        database=s.database, autocommit=False, ssl_disabled=True,
    )  # fmt: skip
    conn.cursor().execute("START TRANSACTION")
    return conn


def _marking(db) -> bool:
    """The claim has selected and now runs its mark (waiting for the other's row)."""
    if db.kind == "postgres":
        rows = db.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
    else:
        # MariaDB's innodb_trx does not always show this wait as LOCK WAIT: its UPDATE runs.
        rows = db.sql(
            "SELECT COUNT(*) FROM information_schema.processlist "
            "WHERE db = DATABASE() AND command = 'Query' AND info LIKE 'UPDATE%%owner = %%'"
        )
    return int(rows[0][0]) > 0


@pytest.mark.parametrize("kind", ["mysql", "pg"])
def test_a_claim_that_did_not_lock_runs_only_what_its_guarded_mark_took(kind, request, monkeypatch):
    """As on an engine whose SKIP LOCKED does not lock (TiDB): another drain marks a
    row between this claim's SELECT and its mark. The mark skips that row, and the
    claim returns only the rows it changed (MySQL: row count, then which; PostgreSQL:
    RETURNING)."""
    db = request.getfixturevalue(f"{kind}_db")
    assert db.run("init").exit_code == 0
    monkeypatch.setenv("MQ_TEST_UNLOCKED_CLAIM", "1")
    with backend_for(db) as b:
        ids = fill(b, "q", 3)
        # No delayed rows to promote here; on MariaDB the promotion's UPDATE would wait
        # for the other's uncommitted row (the first index record past its range)
        # before the claim's SELECT, and the race under test would not happen.
        monkeypatch.setattr(b, "_promote_due", lambda queue: True)
        other = _raw_transaction(db)
        try:
            other.cursor().execute(
                "UPDATE mq_messages SET status = 'processing', owner = 'other' WHERE id = %s",
                (ids[1],),
            )
            got: list = []
            claim = threading.Thread(target=lambda: got.append(b.claim("q", 3, "me")))
            claim.start()
            deadline = time.monotonic() + 60
            # Without row locks the claim selected row 2 too, and its mark now waits
            # for the other's: it cannot end before that commits.
            while not _marking(db):
                assert claim.is_alive(), "the claim did not wait: did its SELECT lock?"
                assert time.monotonic() < deadline, "the claim never reached its mark"
                time.sleep(0.01)
            other.commit()
            claim.join(10)
        finally:
            other.close()
    assert [m.id for m in got[0]] == [ids[0], ids[2]]
    assert db.sql("SELECT id, status, owner FROM mq_messages ORDER BY id") == [
        (ids[0], "processing", "me"), (ids[1], "processing", "other"), (ids[2], "processing", "me"),
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["mysql", "pg"])
def test_claims_that_did_not_lock_still_share_no_message(kind, request, monkeypatch):
    """Four connections claiming at once with no row locks: every message once, and
    no claim reports the queue empty while messages are left."""
    db = request.getfixturevalue(f"{kind}_db")
    assert db.run("init").exit_code == 0
    monkeypatch.setenv("MQ_TEST_UNLOCKED_CLAIM", "1")
    with backend_for(db) as b:
        ids = fill(b, "q", 600)
    taken: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        mine: list[int] = []
        with backend_for(db) as own:
            while batch := own.claim("q", 7, name):
                mine += [m.id for m in batch]
                assert own.ack_success_many([m.id for m in batch], name) == len(batch)
        taken[name] = mine

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(i for got in taken.values() for i in got)
    assert everything == ids


def test_old_server_claim_path(mysql_db):
    """Servers without SKIP LOCKED claim with plain FOR UPDATE: slower, still exactly once."""
    assert mysql_db.run("init").exit_code == 0
    with backend_for(mysql_db) as b:
        ids = fill(b, "q", 300)
    taken: list[int] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        with backend_for(mysql_db) as own:
            own.force_locking_claim = True
            while batch := own.claim("q", 5, name):
                with lock:
                    taken.extend(m.id for m in batch)
                for m in batch:
                    assert own.ack_success(m, name)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == ids


def test_an_old_server_sends_no_claim_ahead(mysql_db):
    """Without SKIP LOCKED a claim waits for other claims' locks: group_ack's claim is
    not sent ahead there (its transaction would stay open while a batch ends)."""
    assert mysql_db.run("init").exit_code == 0
    with backend_for(mysql_db) as b:
        ids = fill(b, "q", 20)
        b.force_locking_claim = True
        assert b.claim_ahead_send("q", 10, "w", []) is False
        assert [m.id for m in b.claim("q", 10, "w")] == ids[:10]  # nothing left unread
        b.force_locking_claim = False
        assert b.claim_ahead_send("q", 10, "w", ids[:10]) is True
        deleted, batch = b.claim_ahead_collect()
        assert (deleted, [m.id for m in batch]) == (10, ids[10:])


def test_a_claim_sent_ahead_that_is_rolled_back_runs_again_in_turn(mysql_db):
    """MariaDB: the group's DELETE sent ahead waits on a row another session locks
    and times out (1205, as a deadlock would roll back); the claim is done again in
    turn once read: the group deleted, the next batch taken, nothing half-done."""
    import pymysql

    assert mysql_db.run("init").exit_code == 0
    settings = parse_database_url(mysql_db.url)
    with backend_for(mysql_db) as b:
        ids = fill(b, "q", 20)
        group = [m.id for m in b.claim("q", 10, "w")]
        b._rows("SET SESSION innodb_lock_wait_timeout = 1")
        other = pymysql.connect(
            host=settings.host, port=settings.port or 3306, user=settings.user or "root",
            password=settings.password or "", database=settings.database, autocommit=False,
        )  # fmt: skip
        try:
            with other.cursor() as cursor:
                cursor.execute("SELECT id FROM mq_messages WHERE id = %s FOR UPDATE", (group[0],))
            thread = b._conn.thread_id()
            assert b.claim_ahead_send("q", 10, "w", group) is True
            sent = time.monotonic()

            def busy() -> bool:  # the statements sent ahead still run (the DELETE waits)
                with other.cursor() as cursor:
                    cursor.execute(
                        "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = %s",
                        (thread,),
                    )
                    return cursor.fetchone()[0] != "Sleep"

            # Its 1 s runs out, then the SELECT runs and the connection is idle (not
            # before that 1 s: idle for a moment between two statements, it would
            # look done before the DELETE waited).
            while (busy() or time.monotonic() < sent + 1) and time.monotonic() < sent + 30:
                time.sleep(0.05)  # 30 s: catches a hang only
            assert not busy()
        finally:
            other.rollback()
            other.close()
        deleted, batch = b.claim_ahead_collect()
        assert (deleted, [m.id for m in batch]) == (10, ids[10:])
        left = b._rows("SELECT id, status, owner FROM mq_messages ORDER BY id")
        assert left == [(i, "processing", "w") for i in ids[10:]]


def test_claim_plan_follows_the_index(db):
    """With delayed, failed and processing rows around, the claim reads the index in order:
    no filesort / temp B-tree, so it locks only the rows it takes (FIELD-NOTES trap 1)."""
    with backend_for(db) as b:
        fill(b, "q", 3000)
        fill(b, "q", 2000, delay=3600)
        fill(b, "q", 1000, priority=5)
        fill(b, "other", 2000)
        for m in b.claim("q", 500, "x"):
            b.ack_failure(m, "x", "boom", 0, True)  # 500 failed
        b.claim("q", 300, "y")  # 300 processing
        if db.kind == "mysql":
            db.sql("ANALYZE TABLE mq_messages")
        plan = " | ".join(b.explain_claim("q", 10))
        if db.kind == "postgres":
            stale = plan  # right after the bulk load: statistics may not know the rows yet
            db.sql("ANALYZE mq_messages")
            plan = " | ".join(b.explain_claim("q", 10))
    if db.kind == "mysql":
        assert "key=mq_messages_claim" in plan, plan
        assert "filesort" not in plan.lower(), plan
        assert "temporary" not in plan.lower(), plan
    elif db.kind == "postgres":
        for found in (stale, plan):
            # The locking SELECT stays a CTE of its own (MATERIALIZED), read in index order.
            assert "CTE Scan on c" in found, found
            assert "Index Scan using mq_messages_claim" in found, found
            assert "Sort" not in found, found
            assert "Seq Scan" not in found, found
    else:
        assert "mq_messages_claim" in plan, plan
        assert "TEMP B-TREE" not in plan.upper(), plan


@pytest.mark.parametrize("count", [1, 250])
def test_tombstones_are_purged_after_retention(db, count):
    with backend_for(db) as b:
        for i in range(count):
            b.enqueue("q", [b'"x"'], unique_key=f"k{i}")
        for m in b.claim("q", count, "me"):
            assert b.ack_success(m, "me", retention=0.001)
        assert db.sql("SELECT COUNT(*) FROM mq_messages WHERE status = 'done'") == [(count,)]
        import time

        time.sleep(0.05)
        assert b.purge_tombstones("q") == count
        assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_claim_acking_deletes_the_group_that_is_still_ours_and_claims_the_next(db):
    """group_ack's batch end: the last group's DELETE and the next claim, one commit
    (PostgreSQL: one statement; MariaDB, SQLite: one transaction)."""
    with backend_for(db) as b:
        ids = fill(b, "q", 6)
        first = [m.id for m in b.claim("q", 3, "drain-a")]
        # one of them was taken from this drain (gc, an operator): not deleted
        db.sql("UPDATE mq_messages SET owner = 'drain-b' WHERE id = %s", (first[2],))
        deleted, batch = b.claim_acking("q", 2, "drain-a", first)
        assert deleted == 2
        assert [m.id for m in batch] == ids[3:5]
        assert all(m.owner == "drain-a" and m.status == "processing" for m in batch)
        left = db.sql("SELECT id, status, owner FROM mq_messages ORDER BY id")
        assert [tuple(r) for r in left] == [
            (first[2], "processing", "drain-b"),
            (ids[3], "processing", "drain-a"),
            (ids[4], "processing", "drain-a"),
            (ids[5], "ready", None),
        ]
        # nothing left to claim: the group is deleted all the same
        deleted, batch = b.claim_acking("q", 5, "drain-a", [ids[3], ids[4]])
        deleted2, rest = b.claim_acking("q", 5, "drain-a", [m.id for m in batch])
        assert (deleted, [m.id for m in batch]) == (2, [ids[5]])
        assert (deleted2, rest) == (1, [])
        assert db.sql("SELECT id FROM mq_messages") == [(first[2],)]


@pytest.mark.parametrize("kind", ["sqlite", "mysql"])
def test_claim_acking_deletes_the_group_in_the_claims_own_commit(kind, request, monkeypatch):
    """Where a claim is a transaction, the group's DELETE is in it (one commit a batch,
    as docs/guarantees.md says): a claim that fails after the DELETE ran leaves the
    group undeleted, to be deleted by the retry; one that commits takes both."""
    from mq_cli.backends.sqlcore import SqlBackend

    db = request.getfixturevalue(f"{kind}_db")
    assert db.run("init").exit_code == 0
    with backend_for(db) as b:
        ids = fill(b, "q", 4)
        first = [m.id for m in b.claim("q", 2, "drain-a")]
        original = SqlBackend._claim_rows

        def broken(self, tx, queue, limit, owner):
            original(self, tx, queue, limit, owner)
            raise RuntimeError("the claim failed before its commit")

        monkeypatch.setattr(SqlBackend, "_claim_rows", broken)
        with pytest.raises(RuntimeError):
            b.claim_acking("q", 2, "drain-a", first)
        rows = db.sql("SELECT id, status, owner FROM mq_messages ORDER BY id")
        assert [tuple(r) for r in rows] == [
            (first[0], "processing", "drain-a"),
            (first[1], "processing", "drain-a"),
            (ids[2], "ready", None),
            (ids[3], "ready", None),
        ]
        monkeypatch.setattr(SqlBackend, "_claim_rows", original)
        deleted, batch = b.claim_acking("q", 2, "drain-a", first)
        assert (deleted, [m.id for m in batch]) == (2, ids[2:])
        assert db.sql("SELECT id FROM mq_messages ORDER BY id") == [(ids[2],), (ids[3],)]


def test_a_rate_limited_claim_that_finds_every_message_held_takes_none_and_keeps_its_tokens(db):
    # Two drains, the last messages: the other drain holds them when this one's
    # tokens are granted. PostgreSQL's one-statement claim then answers with a row
    # of NULLs ("selected none"), which must not become a message or a crash.
    with backend_for(db) as b:
        fill(b, "r", 2)
        assert len(b.claim("r", 2, "drain-a")) == 2
        messages, throttled = b.claim_limited("r", 5, "drain-b", 10.0, 0.0)
        assert messages == [] and throttled is None
        per_second, tokens, _ = b.rate_state("r")
        assert per_second == 10.0 and tokens >= 9.99  # granted, then refunded
        (ident,) = fill(b, "r", 1)
        messages, _ = b.claim_limited("r", 5, "drain-b", 10.0, 0.0)
        assert [m.id for m in messages] == [ident]
