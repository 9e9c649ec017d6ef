"""The drain's `--json` summary adds up on every exit (issue 50): every message it
claimed is in exactly one of succeeded, failed, returned, unrecorded (it ran, or
was running when the drain stopped it, and no result was recorded) and left (not
known to have started, and not given back), however the run ended.

A real `mq drain` process holds a batch when its database refuses an
acknowledgement (every backend), or when the connection is cut and stays cut
(MariaDB, PostgreSQL: a proxy the test owns); what it says is checked against
the handler's own log and the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.proxy import Proxy
from tests.test_drain_db_failure import refuse_deleting
from tests.test_drain_outage import enqueue, ran, wait_for

BUCKETS = ("succeeded", "failed", "returned", "unrecorded", "left")


def adds_up(report: dict) -> None:
    assert all(report[k] >= 0 for k in ("claimed", *BUCKETS)), report
    assert report["claimed"] == sum(report[k] for k in BUCKETS), report


def processing(db) -> int:
    return db.sql("SELECT COUNT(*) FROM mq_messages WHERE status = 'processing'")[0][0]


def test_a_run_stopped_by_max_messages_adds_up(db, tmp_path: Path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record', batch_size: 5}\n"
    )
    enqueue(db, "jobs", [{"n": n} for n in range(10)])
    env = {"MQ_TEST_LOG": str(tmp_path / "ran.jsonl")}
    result = db.run("drain", "-q", "jobs", "--max-messages", "3", "--json", env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    adds_up(report)
    assert (report["succeeded"], report["unrecorded"], report["left"]) == (3, 0, 0), report
    assert report["returned"] == report["claimed"] - 3 and processing(db) == 0


def test_a_refused_acknowledgement_mid_batch_adds_up(db, tmp_path: Path):
    log = tmp_path / "ran.jsonl"
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record', batch_size: 6}\n"
    )
    enqueue(db, "jobs", [{"n": n} for n in range(6)])
    (refused,) = db.sql("SELECT id FROM mq_messages ORDER BY id LIMIT 1 OFFSET 2")[0]
    refuse_deleting(db, refused)
    drain = db.spawn("drain", "-q", "jobs", "--json", env=db.env(MQ_TEST_LOG=str(log)))
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 3, err
    report = json.loads(out)
    adds_up(report)
    assert report["claimed"] == 6 and report["ended"] == "database"
    runs = len(ran(log))
    # Every handler run is a result read (succeeded, failed) or one not recorded.
    assert report["succeeded"] + report["failed"] + report["unrecorded"] == runs, (report, runs)
    # What was neither acknowledged nor given back is still processing, for gc.
    deleted = 6 - db.sql("SELECT COUNT(*) FROM mq_messages")[0][0]
    assert deleted == 2  # the two before the refused one
    stuck = report["succeeded"] - deleted + report["unrecorded"] + report["left"]
    assert processing(db) == stuck, (report, processing(db))


@pytest.fixture(params=["mysql", "postgres"])
def proxied(request):
    """A fresh MariaDB or PostgreSQL database with the schema, a proxy in front of it
    (the test takes it down), and the URL through the proxy."""
    db = request.getfixturevalue("mysql_db" if request.param == "mysql" else "pg_db")
    assert db.run("init").exit_code == 0
    s = parse_database_url(db.url)
    proxy = Proxy((s.host, s.port))
    scheme, user = ("postgresql", "postgres") if db.kind == "postgres" else ("mysql", "root")
    try:
        yield db, proxy, f"{scheme}://{s.user or user}@127.0.0.1:{proxy.port}/{s.database}"
    finally:
        proxy.close()


def test_a_cut_while_the_drain_holds_a_batch_adds_up(proxied, tmp_path: Path):
    db, proxy, url = proxied
    log = tmp_path / "ran.jsonl"
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', batch_size: 5}\n"
    )
    enqueue(db, "jobs", [{"k": n, "sleep": 1} for n in range(5)])
    drain = db.spawn(
        "drain", "-q", "jobs", "--json", "--max-seconds", "3",
        env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url),
    )  # fmt: skip
    try:
        wait_for(lambda: any(r.get("event") == "start" for r in ran(log)))
        proxy.down()  # the first handler runs; the rest of the batch is held
        out, err = drain.communicate(timeout=90)
    finally:
        drain.kill()
        drain.communicate()
    text = err.decode()
    assert drain.returncode == 3, text
    report = json.loads(out)
    adds_up(report)
    assert report["claimed"] == 5 and report["ended"] == "database", report
    # The cut came while the first handler ran: no result could be recorded, nothing
    # given back. All five stay processing, for gc, and the summary says so.
    assert report["succeeded"] + report["failed"] + report["returned"] == 0, report
    assert report["unrecorded"] + report["left"] == 5 == processing(db), report
    starts = sum(1 for r in ran(log) if r.get("event") == "start")
    assert 1 <= starts <= 5
    assert "Traceback" not in text
