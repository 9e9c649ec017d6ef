"""group_ack on PostgreSQL claims the next batch while the last one runs (issue 38):
the claim goes out without waiting and is read once the batch's results are
recorded. Every message still runs once; a claim whose reply is lost gives back
what it may have taken and never the batch that runs; quick handlers only; a
drain that stops gives back what it claimed ahead."""

from __future__ import annotations

import json

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.proxy import Proxy
from tests.test_drain_outage import ran, wait_for

AHEAD = "message(s) ahead"  # the drain's debug line for each claim read that went ahead


@pytest.fixture
def pg(pg_db):
    assert pg_db.run("init").exit_code == 0
    return pg_db


def group_ack_config(tmp_path, handler: str = "tests.jobs:record", batch: int = 10) -> None:
    (tmp_path / "mq.yaml").write_text(
        "queues:\n"
        f"  jobs: {{handler: '{handler}', group_ack: true, batch_size: {batch}, ack_delay: 1h}}\n"
    )


def enqueue(db, count: int, **extra: object) -> None:
    lines = "".join(json.dumps({"n": n, **extra}) + "\n" for n in range(count))
    assert db.run("enqueue", "-q", "jobs", "--lines", input=lines).exit_code == 0


def statuses(db) -> dict:
    return dict(db.sql("SELECT status, COUNT(*) FROM mq_messages GROUP BY status"))


def test_the_next_batch_is_claimed_while_the_last_one_runs(pg, tmp_path):
    group_ack_config(tmp_path)
    enqueue(pg, 95)
    log = tmp_path / "ran.jsonl"
    result = pg.run("-vv", "drain", "-q", "jobs", "--json", env={"MQ_TEST_LOG": str(log)})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["claimed"], report["succeeded"], report["lost"]) == (95, 95, 0)
    assert sorted(r["payload"]["n"] for r in ran(log)) == list(range(95))
    assert statuses(pg) == {}
    # Claimed ahead while quick: a loaded machine may make some handlers look slow.
    assert AHEAD in result.stderr, result.stderr


def test_slow_handlers_hold_no_batch_ahead(pg, tmp_path):
    """A batch claimed ahead would wait behind the slow ones while other drains idle."""
    group_ack_config(tmp_path, "tests.jobs:sleepy", batch=2)
    enqueue(pg, 6, sleep=0.05)
    log = tmp_path / "ran.jsonl"
    result = pg.run("-vv", "drain", "-q", "jobs", "--json", env={"MQ_TEST_LOG": str(log)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["succeeded"] == 6
    assert AHEAD not in result.stderr, result.stderr
    assert statuses(pg) == {}


def test_a_claim_made_ahead_whose_reply_is_lost_keeps_the_batch_that_runs(pg, tmp_path):
    """The claim sent ahead committed, its reply never came, the connection broke. The
    retry gives back what that claim took, and nothing of the batch that runs: each
    message runs once (given back, the running batch would run again)."""
    group_ack_config(tmp_path)
    enqueue(pg, 100)
    settings = parse_database_url(pg.url)
    proxy = Proxy((settings.host, settings.port))
    url = f"postgresql://{settings.user or 'postgres'}@127.0.0.1:{proxy.port}/{settings.database}"
    log = tmp_path / "ran.jsonl"
    # The claim's Bind (the prepared statement's name after the empty portal's):
    # the first claim made ahead executes, its reply is held.
    proxy.lose_reply_after(b"\x00mq_claim_acking\x00", commit=False)
    drain = pg.spawn(
        "drain", "-q", "jobs", "--json", env=pg.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url)
    )
    try:
        wait_for(lambda: not proxy.replies.is_set(), why="no claim was made ahead")
        # Whenever the cut comes, the claim's rows or the next statement's reply are
        # awaited on that connection: the reply is lost either way.
        proxy.cut()
        out, err = drain.communicate(timeout=60)
    finally:
        drain.kill()
        drain.communicate()
        proxy.close()
    text = err.decode()
    assert drain.returncode == 0, text
    assert "reconnecting" in text and "Traceback" not in text, text
    runs = sorted(r["payload"]["n"] for r in ran(log))
    assert runs == list(range(100)), text
    assert statuses(pg) == {}
    assert json.loads(out)["succeeded"] == 100


def test_a_drain_that_stops_gives_back_what_it_claimed_ahead(pg, tmp_path):
    group_ack_config(tmp_path, "tests.jobs:noop", batch=50)
    enqueue(pg, 20000)
    result = pg.run("-vv", "drain", "-q", "jobs", "--json", "--max-seconds", "0.3")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ended"] == "deadline", report
    assert AHEAD in result.stderr
    # What it claimed ahead and did not start is ready again, not left processing.
    left = statuses(pg)
    assert "processing" not in left, left
    assert left.get("ready", 0) == 20000 - report["succeeded"]
    assert report["claimed"] == report["succeeded"] + report["returned"]


def test_a_waiting_drain_claims_ahead_and_goes_back_to_waiting(pg, tmp_path):
    """--wait: the claims made ahead find the queue empty, the drain waits (LISTEN on
    the same connection) and drains the next burst as it comes."""
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record', group_ack: true, batch_size: 10}\n"
    )
    log = tmp_path / "ran.jsonl"
    enqueue(pg, 60)
    drain = pg.spawn(
        "-vv", "drain", "-q", "jobs", "--wait", "--max-seconds", "6", "--json",
        env=pg.env(MQ_TEST_LOG=str(log)),
    )  # fmt: skip
    try:
        wait_for(lambda: len(ran(log)) == 60, why=lambda: len(ran(log)))
        lines = "".join(json.dumps({"n": n}) + "\n" for n in range(60, 120))
        assert pg.run("enqueue", "-q", "jobs", "--lines", input=lines).exit_code == 0
        wait_for(lambda: len(ran(log)) == 120, why=lambda: len(ran(log)))
        out, err = drain.communicate(timeout=30)
    finally:
        drain.kill()
        drain.communicate()
    text = err.decode()
    assert drain.returncode == 0, text
    report = json.loads(out)
    assert (report["succeeded"], report["lost"], report["ended"]) == (120, 0, "deadline"), report
    assert sorted(r["payload"]["n"] for r in ran(log)) == list(range(120))
    assert AHEAD in text and "Traceback" not in text
    assert statuses(pg) == {}
