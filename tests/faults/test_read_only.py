"""A server that turns read-only under open sockets: a demoted primary, a standby.

Private servers (tests/servers.py), flipped while a real drain runs: MariaDB with
`SET GLOBAL read_only = 1` (which binds a user without SUPER / READ ONLY ADMIN:
mq connects as one, with a password), PostgreSQL with `ALTER SYSTEM SET
default_transaction_read_only` and a reload (sessions take it at their next
statement). A short spell: the drain reconnects and finishes, exit 0. A lasting
one: exit 3 once it has been refused for READ_ONLY_FOR (3.5 s; "within 5 s" is
a figure, bench/README.md), saying the database is read-only. Either way no
traceback, no password, at most one reconnect line a second, nothing lost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mq_cli.core.errors import READ_ONLY
from mq_cli.drain.session import READ_ONLY_FOR, RECONNECT_FOR
from tests import servers
from tests.conftest import Db, cannot_run_here
from tests.faults.harness import wait_for
from tests.faults.history import read
from tests.faults.scenario import Scenario

pytestmark = pytest.mark.slow

PASSWORD = "ro-Secret-4711"
MESSAGES = 600
WORK = {"sleep": 0.02}  # ~10 ms a message: the drain still runs when the flip comes


class Server:
    """A private server, the URL of a test database on it, and its read-only switch."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "mysql":
            reason = servers.unavailable()
            if reason:
                cannot_run_here(f"cannot start a private MariaDB: {reason}")
            self.maria = servers.PrivateMariadb()
        else:
            reason = servers.pg_unavailable()
            if reason:
                cannot_run_here(f"cannot start a private PostgreSQL: {reason}")
            self.pg = servers.PrivatePostgres()
        self.count = 0

    def database(self, tmp_path: Path) -> Db:
        self.count += 1
        name = f"mq_ro{self.count}"
        if self.kind == "mysql":
            node = self.maria.node
            node.sql(f"CREATE DATABASE {name}")
            node.sql(f"CREATE USER IF NOT EXISTS 'mq'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
            node.sql(f"GRANT ALL ON {name}.* TO 'mq'@'127.0.0.1'")
            db = Db("mysql", f"mysql://mq:{PASSWORD}@127.0.0.1:{self.maria.port}/{name}", tmp_path)
        else:
            self.pg.sql(f"CREATE DATABASE {name}")
            db = Db("postgres", self.pg.url(name), tmp_path)
        result = db.run("init")
        assert result.exit_code == 0, result.output
        return db

    def read_only(self, on: bool) -> None:
        if self.kind == "mysql":
            self.maria.node.sql(f"SET GLOBAL read_only = {int(on)}")
            return
        import psycopg

        with psycopg.connect(self.pg.url(), autocommit=True, sslmode="disable") as conn:
            conn.execute("SET default_transaction_read_only = off")  # this session may write
            if on:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")

    def close(self) -> None:
        (self.maria if self.kind == "mysql" else self.pg).close()


@pytest.fixture(scope="module", params=["mysql", "postgres"])
def server(request) -> Iterator[Server]:
    s = Server(request.param)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def scenario(server: Server, tmp_path: Path) -> Iterator[Scenario]:
    server.read_only(False)
    db = server.database(tmp_path)
    s = Scenario(tmp_path, db.url, db.sql, {"ro": {}}, db.env())
    s.enqueue("ro", MESSAGES, **WORK)
    try:
        yield s
    finally:
        s.fleet.kill_all()
        server.read_only(False)


def started_running(s: Scenario) -> None:
    wait_for(lambda: len(read(s.history)) >= 100, timeout=30, every=0.02)


def reconnect_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if "reconnect" in line)


def test_a_short_read_only_spell_is_ridden_out(server, scenario):
    s = scenario
    drain = s.fleet.start("ro", "--batch-size", "10")
    started_running(s)
    server.read_only(True)
    flipped = time.monotonic()
    # Well inside READ_ONLY_FOR (3.5 s), so that a loaded machine's slow flip back
    # still ends the spell before the drain gives up.
    time.sleep(1.0)
    server.read_only(False)
    spell = time.monotonic() - flipped
    assert not s.fleet.wait(120), "the drain still runs"
    err = drain.stderr()
    analysis = s.analyse()
    print(f"\nFIGURES read-only spell {server.kind}: {s.figures(analysis)} stderr={err!r}")
    assert s.fleet.problems() == []  # exit 0, no traceback
    assert READ_ONLY in err, "the drain never met the read-only server"
    assert reconnect_lines(err) <= math.ceil(spell) + 1, err  # at most one a second
    assert PASSWORD not in err
    assert analysis.violations == []
    assert analysis.duplicates == 0
    assert analysis.successes == MESSAGES


def test_a_server_that_stays_read_only_makes_the_drain_exit_3_after_its_read_only_window(
    server, scenario
):
    s = scenario
    drain = s.fleet.start("ro", "--batch-size", "10")
    started_running(s)
    server.read_only(True)
    flipped = time.time()
    assert not s.fleet.wait(30), "the drain still runs"
    took = (drain.ended or time.time()) - flipped
    err = drain.stderr()
    print(f"\nFIGURES read-only for good {server.kind}: exit after {took:.2f} s, stderr={err!r}")
    assert drain.proc.returncode == 3, err
    # It tried READ_ONLY_FOR from the first refusal (a new primary may answer), and
    # gave up on that window, not on the longer one of a lost connection.
    assert READ_ONLY_FOR <= took < RECONNECT_FOR, err
    *_, before, last = err.strip().splitlines()
    if "mq gc --stalled --requeue" in last:  # it held messages: they wait for gc
        assert before.startswith(f"mq: {READ_ONLY}"), err
    else:  # the refusal came between two batches: it held none, and says nothing of them
        assert last.startswith(f"mq: {READ_ONLY}") and "held message" not in err, err
    assert "Traceback" not in err and PASSWORD not in err
    assert reconnect_lines(err) <= math.ceil(took) + 1, err
    # Back to a primary: what the drain held comes back through gc, nothing is lost.
    server.read_only(False)
    left = s.finish()
    assert not left, left
    analysis = s.analyse()
    assert s.fleet.problems(allowed_codes=frozenset({0, 3})) == []
    assert analysis.violations == []


def test_commands_against_a_read_only_server_exit_3(server, scenario):
    s = scenario
    db = Db(server.kind, s.url, s.tmp)
    (ident,) = db.sql("SELECT MIN(id) FROM mq_messages")[0]
    server.read_only(True)
    for args in (
        ["enqueue", "-q", "ro", '{"k": "x"}'],
        ["delete", str(ident)],
        ["retry", str(ident)],
        ["pause", "-q", "ro"],
    ):
        result = db.run(*args)
        assert result.exit_code == 3, (args, result.output)
        assert result.output.startswith(f"mq: {READ_ONLY}"), (args, result.output)
        assert len(result.output.strip().splitlines()) <= 2, result.output
        assert "Traceback" not in result.output and PASSWORD not in result.output
    server.read_only(False)
    assert db.run("delete", str(ident)).exit_code == 0
