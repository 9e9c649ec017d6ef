"""A drain and its database going away (issue 32), with real `mq` processes: a drain
that holds nothing waits for the database up to its own end and never blames
held messages; `--json` counts what ran on every exit and says why the run
ended; a signal while it starts is a signal's exit (0), for `--processes` too.

The database goes away behind a proxy the test owns (tests/proxy.py), or is a
port nothing listens on; tests/faults/test_outage.py stops real servers.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.proxy import Proxy
from tests.servers import free_ports
from tests.test_drain_db_failure import refuse_deleting

HELD = "held message"  # what an idle drain must never say


def wait_for(predicate, timeout: float = 20.0, every: float = 0.05, why: object = ""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(
        f"condition not reached within {timeout} s {why() if callable(why) else why}"
    )


def ran(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def enqueue(db, queue: str, payloads: list[object]) -> None:
    lines = "".join(json.dumps(p) + "\n" for p in payloads)
    result = db.run("enqueue", "-q", queue, "--lines", input=lines)
    assert result.exit_code == 0, result.output


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "ran.jsonl"


@pytest.fixture(params=["mysql", "postgres"])
def server_db(request: pytest.FixtureRequest):
    """A fresh database with the schema on the shared MariaDB or PostgreSQL."""
    db = request.getfixturevalue("mysql_db" if request.param == "mysql" else "pg_db")
    assert db.run("init").exit_code == 0
    return db


@pytest.fixture
def proxied(server_db) -> Iterator[tuple[Proxy, str]]:
    """A proxy in front of the database (the test can take it down), and its URL."""
    settings = parse_database_url(server_db.url)
    proxy = Proxy((settings.host, settings.port))
    scheme, user = ("postgresql", "postgres") if server_db.kind == "postgres" else ("mysql", "root")
    try:
        yield (
            proxy,
            f"{scheme}://{settings.user or user}@127.0.0.1:{proxy.port}/{settings.database}",
        )
    finally:
        proxy.close()


def idle(db) -> None:
    """Wait until the drain acknowledged all it ran: it holds nothing from then on."""
    wait_for(lambda: db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)])
    time.sleep(0.2)


def stderr_of(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_an_idle_drain_waits_out_a_lost_database_and_goes_on(server_db, proxied, log, tmp_path):
    db, (proxy, url) = server_db, proxied
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record_time'}\n")
    enqueue(db, "jobs", [{"n": n} for n in range(3)])
    err = tmp_path / "drain.err"
    with open(err, "wb") as errors:
        drain = db.spawn(
            "drain", "-q", "jobs", "--wait", "--max-seconds", "14", "--json",
            env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url), stderr=errors,
        )  # fmt: skip
        try:
            wait_for(lambda: len(ran(log)) == 3)
            idle(db)
            proxy.down()  # its connection cut, and no new one gets through
            wait_for(lambda: "reconnecting until" in stderr_of(err), 10, why=lambda: stderr_of(err))
            time.sleep(3)
            assert drain.poll() is None, stderr_of(err)
            proxy.up()
            back = time.time()
            wait_for(lambda: "the database is back" in stderr_of(err), 10)
            enqueue(db, "jobs", [{"n": n} for n in range(3, 6)])
            wait_for(lambda: len(ran(log)) == 6, 15)
            out, _ = drain.communicate(timeout=30)
        finally:
            drain.kill()
            drain.communicate()  # closes its pipes now, not in a later test's GC
    text = stderr_of(err)
    assert drain.returncode == 0, text
    report = json.loads(out)
    assert (report["claimed"], report["succeeded"], report["ended"]) == (6, 6, "deadline")
    assert text.count("reconnecting until") == 1 and text.count("the database is back") == 1, text
    assert HELD not in text and "Traceback" not in text
    assert len(text.strip().splitlines()) == 2, text  # what cron mails: one line each way
    print(
        f"\nFIGURES proxy outage ({db.kind}): first start after return {min(r['t'] for r in ran(log)[3:]) - back:.2f}s"
    )


def test_an_idle_drain_whose_database_stays_away_exits_3_with_what_ran(
    server_db, proxied, log, tmp_path
):
    db, (proxy, url) = server_db, proxied
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record'}\n")
    enqueue(db, "jobs", [{"n": n} for n in range(4)])
    drain = db.spawn(
        "drain", "-q", "jobs", "--wait", "--max-seconds", "5", "--json",
        env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url),
    )  # fmt: skip
    try:
        wait_for(lambda: len(ran(log)) == 4)
        idle(db)
        proxy.down()
        out, err = drain.communicate(timeout=30)
    finally:
        drain.kill()
        drain.communicate()  # closes its pipes now, not in a later test's GC
    text = err.decode()
    assert drain.returncode == 3, text
    report = json.loads(out)
    assert (report["claimed"], report["succeeded"], report["ended"]) == (4, 4, "database")
    assert text.count("reconnecting until") == 1, text
    assert "stayed away until the end of --max-seconds" in text, text
    assert HELD not in text and "stays processing" not in text and "Traceback" not in text


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "rate_limit"])
def test_a_claim_whose_reply_is_lost_says_its_messages_may_be_held(
    server_db, proxied, log, tmp_path, limited
):
    """The claim committed, its reply never came, the database stayed away: the
    drain cannot know it holds those messages, so it must not say it holds none.
    A rate-limited queue claims inside the transaction that takes its tokens."""
    db, (proxy, url) = server_db, proxied
    limit = ", rate_limit: 1000/s" if limited else ""
    (tmp_path / "mq.yaml").write_text(f"queues:\n  jobs: {{handler: 'tests.jobs:record'{limit}}}\n")
    enqueue(db, "jobs", [{"n": 0}, {"n": 1}])
    # MariaDB claims in a transaction (its COMMIT's reply is lost), PostgreSQL in one
    # autocommitted statement (that statement's reply is lost) unless rate-limited.
    in_transaction = db.kind == "mysql" or limited
    proxy.lose_reply_after(b"SET status = 'processing', owner", commit=in_transaction)
    drain = db.spawn(
        "drain", "-q", "jobs", "--max-seconds", "4", "--json",
        env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url),
    )  # fmt: skip
    try:
        counts = lambda: dict(db.sql("SELECT status, COUNT(*) FROM mq_messages GROUP BY status"))  # noqa: E731
        wait_for(lambda: counts() == {"processing": 2}, why=counts)
        proxy.down()
        out, err = drain.communicate(timeout=30)
    finally:
        drain.kill()
        drain.communicate()
    text = err.decode()
    assert drain.returncode == 3, text
    assert json.loads(out)["ended"] == "database"
    assert "holds no message" not in text and "Traceback" not in text, text
    assert "claim" in text and "`mq gc --stalled --requeue` recovers it" in text, text
    assert ran(log) == []
    assert counts() == {"processing": 2}  # never lost: gc's to requeue


@pytest.mark.parametrize("scheme", ["mysql", "postgresql"])
def test_a_drain_that_cannot_connect_at_start_waits_until_its_end(scheme, tmp_path):
    (port,) = free_ports(1)  # nothing listens there
    url = f"{scheme}://root@127.0.0.1:{port}/mq"
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record'}\n")
    from tests.conftest import Db

    db = Db("postgres" if scheme == "postgresql" else "mysql", url, tmp_path)
    began = time.monotonic()
    drain = db.spawn("drain", "-q", "jobs", "--max-seconds", "3", "--json")
    out, err = drain.communicate(timeout=30)
    took = time.monotonic() - began
    text = err.decode()
    assert drain.returncode == 3, text
    assert took >= 3, text
    report = json.loads(out)
    assert (report["claimed"], report["ended"]) == (0, "database")
    assert text.count("reconnecting until") == 1 and "cannot connect" in text, text
    assert HELD not in text and "Traceback" not in text


def test_a_cron_drain_started_while_the_database_is_away_drains_once_it_is_back(
    server_db, proxied, log, tmp_path
):
    db, (proxy, url) = server_db, proxied
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record_time'}\n")
    enqueue(db, "jobs", [{"n": n} for n in range(5)])
    proxy.down()
    drain = db.spawn(
        "drain", "-q", "jobs", "--json", env=db.env(MQ_TEST_LOG=str(log), MQ_DATABASE_URL=url)
    )
    try:
        # it tried and is trying again, however slowly this machine started it
        wait_for(lambda: proxy.refused >= 2)
        assert drain.poll() is None
        proxy.up()
        back = time.time()
        out, err = drain.communicate(timeout=60)
    finally:
        drain.kill()
        drain.communicate()  # closes its pipes now, not in a later test's GC
    text = err.decode()
    assert drain.returncode == 0, text
    report = json.loads(out)
    assert (report["succeeded"], report["ended"]) == (5, "empty")
    assert "reconnecting until" in text and "a cron drain's patience, 30 s" in text, text
    assert "the database is back" in text and HELD not in text
    print(
        f"\nFIGURES proxy outage cron ({db.kind}): first start after return {min(r['t'] for r in ran(log)) - back:.2f}s"
    )


def test_a_drain_waits_for_a_locked_sqlite_file(sqlite_db, log, tmp_path):
    """SQLite has no server to lose: a file another process holds locked is waited
    for by the busy timeout, silently, and the drain goes on."""
    db = sqlite_db
    assert db.run("init").exit_code == 0
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record'}\n")
    enqueue(db, "jobs", [{"n": 0}])
    drain = db.spawn(
        "drain", "-q", "jobs", "--wait", "--max-seconds", "8", "--json",
        env=db.env(MQ_TEST_LOG=str(log)),
    )  # fmt: skip
    try:
        wait_for(lambda: len(ran(log)) == 1)
        holder = sqlite3.connect(str(tmp_path / "mq.db"), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        time.sleep(3)
        holder.execute("COMMIT")
        holder.close()
        enqueue(db, "jobs", [{"n": 1}])
        wait_for(lambda: len(ran(log)) == 2, 15)
        out, err = drain.communicate(timeout=30)
    finally:
        drain.kill()
        drain.communicate()  # closes its pipes now, not in a later test's GC
    assert drain.returncode == 0, err
    assert err == b""
    assert json.loads(out)["succeeded"] == 2


# -- the summary counts what ran --------------------------------------------------


def test_processes_json_counts_a_child_that_ended_early(db, log, tmp_path):
    """One child of --processes stops with exit 3 (its database refused an
    acknowledgement): the summary still counts what it ran, and says why."""
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  a: {handler: 'tests.jobs:record', batch_size: 1}\n"
        "  b: {handler: 'tests.jobs:record', batch_size: 1}\n"
    )
    enqueue(db, "a", [{"q": "a", "n": n} for n in range(20)])
    enqueue(db, "b", [{"q": "b", "n": n} for n in range(10)])
    (refused,) = db.sql(
        "SELECT id FROM mq_messages WHERE queue = 'b' ORDER BY id LIMIT 1 OFFSET 5"
    )[0]
    refuse_deleting(db, refused)
    parent = db.spawn(
        "drain", "-q", "a", "-q", "b", "--processes", "1", "--json",
        env=db.env(MQ_TEST_LOG=str(log)),
    )  # fmt: skip
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 3, err
    report = json.loads(out)
    runs = ran(log)
    by_queue = {q: [r for r in runs if r["payload"]["q"] == q] for q in ("a", "b")}
    assert len(by_queue["a"]) == 20 and len(by_queue["b"]) >= 6, runs
    assert report["processes"] == 2 and report["queues"] == ["a", "b"]
    assert report["succeeded"] == len(runs), (report, len(runs))
    assert report["claimed"] >= len(runs)
    assert report["ended"] == "database"


def test_a_single_drain_json_counts_what_ran_before_exit_3(db, log, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  b: {handler: 'tests.jobs:record', batch_size: 1}\n"
    )
    enqueue(db, "b", [{"q": "b", "n": n} for n in range(10)])
    (refused,) = db.sql("SELECT id FROM mq_messages ORDER BY id LIMIT 1 OFFSET 5")[0]
    refuse_deleting(db, refused)
    drain = db.spawn("drain", "-q", "b", "--json", env=db.env(MQ_TEST_LOG=str(log)))
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 3, err
    report = json.loads(out)
    assert report["succeeded"] == len(ran(log)) >= 6
    assert report["ended"] == "database" and report["queues"] == ["b"]


# -- a signal while a drain starts ------------------------------------------------


def unreachable_url() -> str:
    (port,) = free_ports(1)
    return f"postgresql://postgres@127.0.0.1:{port}/mq"


def test_sigterm_while_a_drain_starts_is_a_signals_exit(tmp_path):
    """Waiting for a database it cannot reach yet, the drain is still starting: SIGTERM
    ends it as the contract says a signal does (exit 0), and --json says so."""
    from tests.conftest import Db

    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {handler: 'tests.jobs:record'}\n")
    db = Db("postgres", unreachable_url(), tmp_path)
    err = tmp_path / "drain.err"
    with open(err, "wb") as errors:
        drain = db.spawn("drain", "-q", "jobs", "--wait", "--max-seconds", "60", "--json",
                         stderr=errors)  # fmt: skip
        try:
            wait_for(lambda: "reconnecting until" in stderr_of(err), 20)
            drain.send_signal(signal.SIGTERM)
            out, _ = drain.communicate(timeout=10)
        finally:
            drain.kill()
            drain.communicate()  # closes its pipes now, not in a later test's GC
    assert drain.returncode == 0, stderr_of(err)
    report = json.loads(out)
    assert (report["claimed"], report["ended"]) == (0, "signal")
    assert HELD not in stderr_of(err) and "Traceback" not in stderr_of(err)


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


@pytest.mark.parametrize("when", ["at once", "while waiting for the database"])
def test_sigterm_to_processes_while_its_drains_start_is_a_signals_exit(when, tmp_path):
    """The parent passes SIGTERM on to drains that may not have caught it yet (still
    starting Python): they die by it, and the parent reports a signal, not exit 3."""
    from tests.conftest import Db

    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record', concurrency: 2}\n"
    )
    db = Db("postgres", unreachable_url(), tmp_path)
    err = tmp_path / "parent.err"
    with open(err, "wb") as errors:
        parent = db.spawn("drain", "-q", "jobs", "--wait", "--max-seconds", "60",
                          "--processes", "0", "--json", stderr=errors)  # fmt: skip
        try:
            wait_for(lambda: len(children_of(parent.pid)) == 2, 60, every=0.001)
            if when != "at once":
                wait_for(lambda: stderr_of(err).count("reconnecting until") == 2, 60)
            parent.send_signal(signal.SIGTERM)
            # A hang's deadline only: a drain that missed the signal would run out its
            # --max-seconds (60) and report "deadline", which the assertion names.
            out, _ = parent.communicate(timeout=120)
        finally:
            parent.kill()
            parent.communicate()  # closes its pipes now, not in a later test's GC
    text = stderr_of(err)
    assert parent.returncode == 0, text
    report = json.loads(out)
    assert (report["processes"], report["claimed"], report["ended"]) == (2, 0, "signal"), text
    assert "Traceback" not in text and "killed by" not in text
