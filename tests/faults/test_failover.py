"""A PostgreSQL failover: a private primary and its streaming standby
(tests/servers.py), drains on a multi-host URL with target_session_attrs=read-write.

The primary's postmaster is killed with -9 and the standby promoted; the
waiting drains reconnect to the new primary (libpq finds it from the URL) and
go on without a restart. Replication is asynchronous, so what the old primary
had not sent when it died is lost with it: a message whose acknowledgement
was among that runs again (at-least-once), and only messages in flight at the
failover may. A standby reached by mistake is refused with one line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from mq_cli.drain.session import RECONNECT_FAILOVER_FOR
from tests.conftest import Db, cannot_run_here
from tests.faults.harness import wait_for
from tests.faults.history import Disruption
from tests.faults.scenario import BATCH, Scenario
from tests.servers import PrivatePostgres, PrivateStandby, kill_postmaster, pg_unavailable

# serial: the failover's timing is under test (the fence, the promotion's delay), not
# how it fares beside other workers' scenarios on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

#: between the primary's death and the promotion: a failover manager notices the
#: death first (Patroni's ttl: 30 s); more than liveness.FENCE, so a drain cut off
#: mid-handler has stopped it before the new primary can give its message to another
DETECTION = 2.5


class Pair:
    def __init__(self) -> None:
        self.primary = PrivatePostgres()
        try:
            self.standby = PrivateStandby(self.primary)
        except BaseException:
            self.primary.close()
            raise

    def url(self, database: str, *servers: PrivatePostgres) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers or (self.primary, self.standby))
        attrs = "?target_session_attrs=read-write" if len(servers) != 1 else ""
        return f"postgresql://postgres@{hosts}/{database}{attrs}"

    def close(self) -> None:
        self.standby.close()
        self.primary.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    reason = pg_unavailable()
    if reason:
        cannot_run_here(f"no private PostgreSQL on this machine: {reason}")
    pair = Pair()
    try:
        pair.primary.sql("CREATE DATABASE mqf")
        yield pair
    finally:
        pair.close()


def sql_on(url: str):
    """Run SQL on whichever host of ``url`` libpq settles on (the primary)."""

    def sql(statement: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
            cursor = conn.execute(statement, params or None)  # type: ignore[call-overload]
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

    return sql


def test_a_standby_reached_by_mistake_is_refused_in_one_line(pair, tmp_path):
    url = pair.url("mqf")
    db = Db("postgres", url, tmp_path)
    assert db.run("init").exit_code == 0
    wait_for(lambda: _replicated(pair), 30)
    standby = Db("postgres", pair.url("mqf", pair.standby), tmp_path)
    for args in (("enqueue", "-q", "q", "{}"), ("drain", "-q", "q", "--handler", "tests.handlers:ok"),
                 ("stats",), ("gc", "--stalled", "--requeue")):  # fmt: skip
        result = standby.run(*args)
        assert result.exit_code == 3, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "mq: the database is read-only (a standby?) at postgresql://postgres@127.0.0.1:"
        ), result.stderr
        assert "Traceback" not in result.output
    result = standby.run("check")
    assert result.exit_code == 1
    assert re.search(r"FAIL\s+database mode\s+PostgreSQL \S+ in recovery: ", result.stdout)


def _replicated(pair: Pair) -> bool:
    import psycopg

    try:
        rows = sql_on(pair.url("mqf", pair.standby))("SELECT to_regclass('mq_messages')")
    except psycopg.OperationalError:  # the database itself is not replayed yet
        return False
    return rows[0][0] is not None


def test_waiting_drains_follow_a_promoted_standby(pair, tmp_path):
    url = pair.url("mqf")
    sql = sql_on(url)
    db = Db("postgres", url, tmp_path)
    assert db.run("init").exit_code == 0
    s = Scenario(tmp_path, url, sql, {"f": {}}, db.env())
    for _ in range(3):
        s.enqueue("f", 1000, sleep=0.01)
    drains = [s.fleet.start("f", "--wait", "--max-seconds", "25", options=["-v"]) for _ in (1, 2)]
    wait_for(lambda: sql("SELECT COUNT(*) FROM mq_messages")[0][0] < 2500, 60, every=0.05)
    died = time.monotonic()
    kill_postmaster(pair.primary)
    time.sleep(DETECTION)
    pair.standby.promote()
    promoted = time.monotonic()
    # In flight at the failover: what a drain began before the new primary took over
    # (its worker starts messages handed over ahead until the fence, liveness.FENCE,
    # and claims or acknowledgements the old primary had not sent are lost with it).
    took_over = time.time()
    on_new = sql_on(pair.url("mqf", pair.standby))
    start = on_new("SELECT COUNT(*) FROM mq_messages")[0][0]
    # Within the drains' own failover window (they give up after it): the seconds
    # are the FIGURES line's, with their target in bench/README.md.
    wait_for(
        lambda: on_new("SELECT COUNT(*) FROM mq_messages")[0][0] < start,
        RECONNECT_FAILOVER_FOR,
        every=0.02,
    )
    first_ack = time.monotonic()
    try:
        stuck = s.fleet.wait(60)
        assert not stuck, "drains still running after --max-seconds"
        left = s.finish()
    finally:
        s.fleet.kill_all()
    analysis = s.analyse([Disruption(d.pid, took_over, "failover") for d in drains])
    tries = sum(d.stderr().count("reconnecting (try") for d in drains)
    print(
        f"\nFIGURES postgres failover: {s.figures(analysis)} "
        f"first_ack_after_death={first_ack - died:.2f}s "
        f"first_ack_after_promotion={first_ack - promoted:.2f}s reconnect_tries={tries}"
    )
    assert not left, f"still not done after the final drains: {left}"
    assert [d.proc.returncode for d in drains] == [0, 0], [d.stderr()[-800:] for d in drains]
    assert s.fleet.problems() == []  # no traceback, no undocumented exit
    assert analysis.violations == []  # lost 0, no parallel run, duplicates explained
    assert analysis.duplicates <= 2 * BATCH
    for d in drains:  # "(try 1)" holding messages, "until HH:MM:SS" holding none
        assert "reconnecting" in d.stderr()
