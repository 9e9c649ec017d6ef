"""Signals and limits keep their word while a drain holds a batch and its database
is away (issue 50, item 5), with real `mq drain` processes behind a proxy the
test owns (tests/proxy.py) on MariaDB and PostgreSQL:

- a second SIGTERM (or SIGINT) ends the drain at once: what it held stays
  processing for gc, and stderr and `--json` name those messages;
- past --max-seconds a drain tries to record what it holds for at most
  RECORD_AFTER_END seconds (session.py), not the whole reconnect window;
- nothing it held runs twice before gc gives it back.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from mq_cli.core.dburl import parse_database_url
from mq_cli.drain.session import RECONNECT_FOR, RECORD_AFTER_END
from tests.proxy import Proxy
from tests.test_drain_outage import enqueue, ran, stderr_of, wait_for
from tests.test_drain_summary import adds_up, processing

HANG = 60  # a deadline that only catches a hang


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


def starts(log: Path) -> list[int]:
    return [r["payload"]["k"] for r in ran(log) if r.get("event") == "start"]


def ids_of(db) -> dict[int, int]:
    """Each message's id by its payload's k (they were enqueued in order)."""
    rows = db.sql("SELECT id FROM mq_messages ORDER BY id")
    return {k: row[0] for k, row in enumerate(rows)}


def config(tmp_path: Path) -> None:
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', batch_size: 3}\n"
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_second_signal_ends_a_drain_holding_a_batch_while_its_database_is_away(
    proxied, tmp_path: Path, sig
):
    db, proxy, url = proxied
    log, err = tmp_path / "ran.jsonl", tmp_path / "drain.err"
    config(tmp_path)
    enqueue(db, "jobs", [{"k": k, "sleep": 1.5} for k in range(3)])
    ids = ids_of(db)
    with open(err, "wb") as errors:
        drain = db.spawn(
            "drain", "-q", "jobs", "--max-seconds", "120", "--json",
            env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url), stderr=errors,
        )  # fmt: skip
        try:
            wait_for(lambda: starts(log) == [0])
            proxy.down()  # message 0 runs; 1 and 2 are held, unstarted
            wait_for(lambda: "reconnecting" in stderr_of(err), 20, why=lambda: stderr_of(err))
            drain.send_signal(sig)
            time.sleep(0.3)
            drain.send_signal(sig)
            second = time.monotonic()
            out, _ = drain.communicate(timeout=HANG)
            took = time.monotonic() - second
        finally:
            drain.kill()
            drain.communicate()
    text = stderr_of(err)
    assert drain.returncode == 3, (text, out)  # a database error: what it held is not recorded
    report = json.loads(out)
    adds_up(report)
    assert report["ended"] == "signal", report
    assert report["claimed"] == 3 and report["succeeded"] + report["returned"] == 0, report
    # Which messages it left, by id, in --json and on stderr.
    assert report["for_gc"] == sorted(ids.values()), report
    assert "second signal" in text and "`mq gc --stalled --requeue`" in text, text
    assert ", ".join(map(str, sorted(ids.values()))) in text, text
    assert "Traceback" not in text
    # It did not wait out the reconnect window after the second signal.
    assert took < RECONNECT_FOR, (took, text)
    print(f"\nFIGURES second {sig.name} while away ({db.kind}): exit {took:.2f}s after it")

    # Held: still processing, nothing ran twice; gc gives them back and they run.
    proxy.up()
    assert processing(db) == 3
    before = starts(log)  # 0 ran; on PostgreSQL 1 may have started too (sent ahead)
    assert 0 in before and len(before) == len(set(before)), ran(log)
    gc = db.run("gc", "--stalled", "--requeue", "--json")
    assert gc.exit_code == 0, gc.output
    assert processing(db) == 0
    # Requeued from a dead drain, they are ready again after a grace (liveness.GRACE).
    drain_all = lambda: db.run("drain", "-q", "jobs", env={"MQ_TEST_LOG": str(log)})  # noqa: E731
    wait_for(
        lambda: (
            drain_all().exit_code == 0
            and processing(db) == 0
            and not db.sql("SELECT id FROM mq_messages")
        ),
        30,
        every=0.3,
    )
    assert sorted(starts(log)) == sorted(before + [0, 1, 2])  # each once more, after gc
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


def test_past_max_seconds_a_drain_records_held_results_for_a_bounded_time(proxied, tmp_path: Path):
    db, proxy, url = proxied
    log, err = tmp_path / "ran.jsonl", tmp_path / "drain.err"
    config(tmp_path)
    enqueue(db, "jobs", [{"k": k, "sleep": 1} for k in range(3)])
    ids = ids_of(db)
    max_seconds = 3
    with open(err, "wb") as errors:
        drain = db.spawn(
            "drain", "-q", "jobs", "--max-seconds", str(max_seconds), "--json",
            env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url), stderr=errors,
        )  # fmt: skip
        try:
            wait_for(lambda: starts(log) == [0])
            cut = time.monotonic()
            proxy.down()  # and it stays down past the drain's end
            out, _ = drain.communicate(timeout=HANG)
            took = time.monotonic() - cut
        finally:
            drain.kill()
            drain.communicate()
    text = stderr_of(err)
    print(text)
    assert drain.returncode == 3, text
    report = json.loads(out)
    adds_up(report)
    assert report["ended"] == "database" and report["for_gc"] == sorted(ids.values()), report
    assert "--max-seconds" in text and "`mq gc --stalled --requeue`" in text, text
    # The cut came within its first second, after start-up: its end is at most
    # --max-seconds away, and it tries RECORD_AFTER_END more; 3 s are for a loaded host.
    assert took < max_seconds + RECORD_AFTER_END + 3 < RECONNECT_FOR + 1, (took, text)
    print(f"\nFIGURES held past --max-seconds ({db.kind}): exit {took:.2f}s after the cut")
    proxy.up()
    assert processing(db) == 3
    assert 0 in starts(log) and len(starts(log)) == len(set(starts(log))), ran(log)


def test_processes_passes_a_second_signal_on_and_names_what_its_drains_left(
    proxied, tmp_path: Path
):
    """`--processes`: each drain holds a batch when the database goes; the parent
    passes both signals on, and its one summary lists what every drain left."""
    db, proxy, url = proxied
    log, err = tmp_path / "ran.jsonl", tmp_path / "parent.err"
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:alive', batch_size: 3, concurrency: 2}\n"
    )
    enqueue(db, "jobs", [{"k": k, "sleep": 1.5} for k in range(6)])
    ids = sorted(ids_of(db).values())
    with open(err, "wb") as errors:
        parent = db.spawn(
            "drain", "-q", "jobs", "--processes", "0", "--max-seconds", "120", "--json",
            env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url), stderr=errors,
        )  # fmt: skip
        try:
            wait_for(lambda: len(starts(log)) == 2, 30, why=lambda: stderr_of(err))
            proxy.down()
            wait_for(
                lambda: stderr_of(err).count("reconnecting") >= 2, 20, why=lambda: stderr_of(err)
            )
            parent.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            parent.send_signal(signal.SIGTERM)
            out, _ = parent.communicate(timeout=HANG)
        finally:
            parent.kill()
            parent.communicate()
    text = stderr_of(err)
    assert parent.returncode == 3, text
    report = json.loads(out)
    adds_up(report)
    assert (report["processes"], report["claimed"]) == (2, 6), report
    assert report["for_gc"] == ids and report["ended"] == "signal", report
    assert text.count("stopped at once by a second signal") == 2, text
    assert text.count("got SIGTERM while the database is away") == 2, text
    assert "Traceback" not in text
    proxy.up()
    assert processing(db) == 6
    assert len(starts(log)) == len(set(starts(log))), ran(log)
