"""group_ack on PostgreSQL and MariaDB claims the next batch while the last one runs
(issue 38): the claim goes out without waiting and is read once the batch's results
are recorded. Every message still runs once; a claim whose reply is lost gives back
what it may have taken and never the batch that runs; quick handlers only; a
drain that stops gives back what it claimed ahead; on MariaDB, the claim's
transaction ends at the drain's next tick when a handler outlasts the estimate."""

from __future__ import annotations

import json

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.proxy import Proxy
from tests.test_drain_outage import ran, wait_for

AHEAD = "message(s) ahead"  # the drain's debug line for each claim read that went ahead


@pytest.fixture(params=["postgres", "mysql"])
def server(request):
    """PostgreSQL (one statement sent ahead) and MariaDB (a transaction's first three)."""
    db = request.getfixturevalue("pg_db" if request.param == "postgres" else "mysql_db")
    assert db.run("init").exit_code == 0
    return db


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


def test_the_next_batch_is_claimed_while_the_last_one_runs(server, tmp_path):
    group_ack_config(tmp_path)
    enqueue(server, 95)
    log = tmp_path / "ran.jsonl"
    result = server.run("-vv", "drain", "-q", "jobs", "--json", env={"MQ_TEST_LOG": str(log)})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["claimed"], report["succeeded"], report["lost"]) == (95, 95, 0)
    assert sorted(r["payload"]["n"] for r in ran(log)) == list(range(95))
    assert statuses(server) == {}
    # Claimed ahead while quick: a loaded machine may make some handlers look slow.
    assert AHEAD in result.stderr, result.stderr


def test_slow_handlers_hold_no_batch_ahead(server, tmp_path):
    """A batch claimed ahead would wait behind the slow ones while other drains idle."""
    group_ack_config(tmp_path, "tests.jobs:sleepy", batch=2)
    enqueue(server, 6, sleep=0.05)
    log = tmp_path / "ran.jsonl"
    result = server.run("-vv", "drain", "-q", "jobs", "--json", env={"MQ_TEST_LOG": str(log)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["succeeded"] == 6
    assert AHEAD not in result.stderr, result.stderr
    assert statuses(server) == {}


#: what each server's claim sent ahead carries first, and whether its reply is lost
#: there or once its transaction's COMMIT went (MariaDB: the claim commits when read)
LOSE_AFTER = [
    # The claim's Bind (the prepared statement's name after the empty portal's):
    # the first claim made ahead executes, its reply is held.
    pytest.param("postgres", b"\x00mq_claim_acking\x00", False, id="postgres"),
    # The group's DELETE goes only with a claim: the first is the one sent ahead.
    pytest.param("mysql", b"DELETE FROM `mq_messages` WHERE id IN", False, id="mysql-sent"),
    pytest.param("mysql", b"DELETE FROM `mq_messages` WHERE id IN", True, id="mysql-committed"),
]


@pytest.mark.parametrize("kind, marker, at_commit", LOSE_AFTER)
def test_a_claim_made_ahead_whose_reply_is_lost_keeps_the_batch_that_runs(
    request, tmp_path, kind, marker, at_commit
):
    """The claim sent ahead went (or committed), its reply never came, the connection
    broke. The retry gives back what that claim may have taken, and nothing of the
    batch that runs: each message runs once (given back, the running batch would run
    again)."""
    db = request.getfixturevalue("pg_db" if kind == "postgres" else "mysql_db")
    assert db.run("init").exit_code == 0
    group_ack_config(tmp_path)
    enqueue(db, 100)
    settings = parse_database_url(db.url)
    proxy = Proxy((settings.host, settings.port))
    scheme, user = ("postgresql", "postgres") if kind == "postgres" else ("mysql", "root")
    url = f"{scheme}://{settings.user or user}@127.0.0.1:{proxy.port}/{settings.database}"
    log = tmp_path / "ran.jsonl"
    proxy.lose_reply_after(marker, commit=at_commit)
    drain = db.spawn(
        "-vv", "drain", "-q", "jobs", "--json",
        env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url),
    )  # fmt: skip
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
    assert AHEAD in text and "reconnecting" in text and "Traceback" not in text, text
    runs = sorted(r["payload"]["n"] for r in ran(log))
    assert runs == list(range(100)), text
    assert statuses(db) == {}
    assert json.loads(out)["succeeded"] == 100


def test_a_drain_that_stops_gives_back_what_it_claimed_ahead(server, tmp_path):
    group_ack_config(tmp_path, "tests.jobs:noop", batch=50)
    enqueue(server, 20000)
    result = server.run("-vv", "drain", "-q", "jobs", "--json", "--max-seconds", "0.3")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ended"] == "deadline", report
    assert AHEAD in result.stderr
    # What it claimed ahead and did not start is ready again, not left processing.
    left = statuses(server)
    assert "processing" not in left, left
    assert left.get("ready", 0) == 20000 - report["succeeded"]
    assert report["claimed"] == report["succeeded"] + report["returned"]


def test_a_waiting_drain_claims_ahead_and_goes_back_to_waiting(server, tmp_path):
    """--wait: the claims made ahead find the queue empty, the drain waits (LISTEN on
    the same connection) and drains the next burst as it comes."""
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record', group_ack: true, batch_size: 10}\n"
    )
    log = tmp_path / "ran.jsonl"
    enqueue(server, 60)
    drain = server.spawn(
        "-vv", "drain", "-q", "jobs", "--wait", "--max-seconds", "6", "--json",
        env=server.env(MQ_TEST_LOG=str(log)),
    )  # fmt: skip
    try:
        wait_for(lambda: len(ran(log)) == 60, why=lambda: len(ran(log)))
        lines = "".join(json.dumps({"n": n}) + "\n" for n in range(60, 120))
        assert server.run("enqueue", "-q", "jobs", "--lines", input=lines).exit_code == 0
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
    assert statuses(server) == {}


def test_a_handler_that_outlasts_the_estimate_leaves_no_claim_half_done(server, tmp_path):
    """The claim went ahead as the batch was ending, then its last handler ran long.
    Within a tick the claim is read and done: the next batch is marked this drain's
    and the group's successes are deleted (MariaDB: its transaction committed), not
    held in an open transaction while the handler runs."""
    group_ack_config(tmp_path, "tests.jobs:wait_for_file", batch=20)
    (tmp_path / "open").touch()
    release = tmp_path / "release"
    lines = "".join(
        json.dumps({"n": n, "until": str(release if n == 19 else tmp_path / "open")}) + "\n"
        for n in range(40)
    )
    assert server.run("enqueue", "-q", "jobs", "--lines", input=lines).exit_code == 0
    log = tmp_path / "ran.jsonl"
    drain = server.spawn(
        "-vv", "drain", "-q", "jobs", "--json", env=server.env(MQ_TEST_LOG=str(log))
    )
    try:

        def ended() -> list[int]:
            return [r["payload"]["n"] for r in ran(log) if r["event"] == "end"]

        # Messages 0-18 ended; 19 waits for its file. The claim went with some of
        # them: the next batch is marked (none ready), that group is gone (< 40).
        wait_for(lambda: len(ended()) == 19, why=lambda: ran(log))
        wait_for(
            lambda: set(left := statuses(server)) == {"processing"} and left["processing"] < 40,
            why=lambda: statuses(server),
        )
        release.touch()
        out, err = drain.communicate(timeout=60)
    finally:
        release.touch()
        drain.kill()
        drain.communicate()
    text = err.decode()
    assert drain.returncode == 0, text
    assert AHEAD in text and "Traceback" not in text, text
    assert sorted(ended()) == list(range(40))
    assert len(ran(log)) == 80  # each started once and ended once
    assert json.loads(out)["succeeded"] == 40
    assert statuses(server) == {}
