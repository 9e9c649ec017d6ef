"""`mq check` says when the queue table has grown in a way that costs, and how to fix it.

Each test makes the growth honestly (messages enqueued, then deleted as drains
would), with the thresholds' floors lowered so a few MB will do; it checks that
the line names the problem and the exact command, runs that command, and
checks that the line clears. A fresh table gives clean lines.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading

import mq_cli
from mq_cli.backends import bloat


def line(stdout: str, name: str) -> str:
    found = [x for x in stdout.splitlines() if re.match(rf"\S+\s+{name}\s", x)]
    assert len(found) == 1, stdout
    return found[0]


def wait_for(probe, timeout: float = 10.0) -> None:
    """Statistics arrive a moment after the change (PostgreSQL's collector, InnoDB's purge)."""
    for _ in range(int(timeout / 0.1)):
        if probe():
            return
        threading.Event().wait(0.1)
    raise AssertionError("the database's figures never showed the change")


def enqueue(db, count: int, size: int) -> None:
    with mq_cli.connect(database=db.url) as mq:
        mq.enqueue_many("q", ("x" * size for _ in range(count)))


def test_a_fresh_table_gives_clean_lines(db):
    result = db.run("check")
    assert result.exit_code == 0, result.output
    names = ["dead rows", "statistics"] if db.kind == "postgres" else ["free space"]
    if db.kind == "mysql":
        names.append("statistics")
    for name in names:
        assert line(result.stdout, name).startswith("ok "), result.stdout


def test_postgres_dead_rows_and_a_stale_plan(pg_db, monkeypatch):
    assert pg_db.run("init").exit_code == 0
    pg_db.sql("ALTER TABLE mq_messages SET (autovacuum_enabled = false)")  # no autoanalyze either
    enqueue(pg_db, 3000, 10)
    pg_db.sql("VACUUM mq_messages")  # vacuumed lately: a warning, not autovacuum missing
    pg_db.sql("DELETE FROM mq_messages WHERE id % 10 <> 0")
    monkeypatch.setattr(bloat, "DEAD_ROWS", 100)
    monkeypatch.setattr(bloat, "VACUUM_WARN_AGE", 0.0)
    monkeypatch.setattr(bloat, "STALE_CHANGES", 100)
    stat = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'mq_messages'"
    wait_for(lambda: pg_db.sql(stat)[0][0] > 2000)

    result = pg_db.run("check")
    assert result.exit_code == 0, result.output  # warnings, not failures
    dead = line(result.stdout, "dead rows")
    assert re.match(
        r"warn\s+dead rows\s+table mq_messages \(\d+ KB with indexes\) holds \d+ dead row versions for 300 live",
        dead,
    )
    assert "autovacuum is off for it" in dead and "; run VACUUM (ANALYZE) mq_messages;" in dead
    assert "something holds the vacuum horizon" in dead
    stale = line(result.stdout, "statistics")
    assert re.match(
        r"warn\s+statistics\s+\d+ row changes since table mq_messages was last analyzed \(never\)",
        stale,
    )

    pg_db.sql(re.search(r"run (ANALYZE \w+)", stale).group(1))
    result = pg_db.run("check")
    assert line(result.stdout, "statistics").startswith("ok "), result.stdout
    assert line(result.stdout, "dead rows").startswith("warn "), result.stdout

    pg_db.sql(re.search(r"run (VACUUM \(ANALYZE\) \w+)", dead).group(1))
    result = pg_db.run("check")
    assert result.exit_code == 0, result.output
    assert line(result.stdout, "dead rows").startswith("ok "), result.stdout


def test_mariadb_free_space_and_stale_statistics(mysql_db, monkeypatch):
    assert mysql_db.run("init").exit_code == 0
    mysql_db.sql("ALTER TABLE mq_messages STATS_AUTO_RECALC = 0")
    enqueue(mysql_db, 12000, 2000)  # ~30 MB
    mysql_db.sql("DELETE FROM mq_messages WHERE id > 100")  # the head stays: pages empty whole
    monkeypatch.setattr(bloat, "FREE_BYTES", 8 * 2**20)
    monkeypatch.setattr(bloat, "STALE_CHANGES", 100)
    monkeypatch.setattr(bloat, "ANALYZE_AGE", 0.0)
    space = "SELECT data_free FROM information_schema.TABLES WHERE table_name = 'mq_messages' AND table_schema = DATABASE()"
    wait_for(lambda: mysql_db.sql(space)[0][0] > 16 * 2**20)  # InnoDB's purge frees the pages

    result = mysql_db.run("check")
    assert result.exit_code == 0, result.output
    stale = line(result.stdout, "statistics")
    assert re.match(
        r"warn\s+statistics\s+\d+ row changes since table mq_messages's statistics", stale
    )
    assert line(result.stdout, "free space").startswith("warn "), result.stdout
    mysql_db.sql(re.search(r"run (ANALYZE TABLE \w+)", stale).group(1))
    # The lengths are as of the last statistics: ANALYZE counts the deleted rows' pages
    # still in the table's extents as used, and the file is still mostly free.
    result = mysql_db.run("check")
    assert line(result.stdout, "statistics").startswith("ok "), result.stdout
    free = line(result.stdout, "free space")
    assert re.match(r"warn\s+free space\s+table mq_messages: its file holds \d+ MB free", free)
    assert "online on InnoDB" in free

    mysql_db.sql(re.search(r"run (OPTIMIZE TABLE \w+)", free).group(1))
    result = mysql_db.run("check")
    assert result.exit_code == 0, result.output
    assert line(result.stdout, "free space").startswith("ok "), result.stdout
    assert mysql_db.sql("SELECT count(*) FROM mq_messages") == [(100,)]


def test_sqlite_free_pages(sqlite_db, monkeypatch):
    assert sqlite_db.run("init").exit_code == 0
    enqueue(sqlite_db, 3000, 4000)  # ~12 MB
    sqlite_db.sql("DELETE FROM mq_messages WHERE id > 10")
    monkeypatch.setattr(bloat, "FREE_BYTES", 2**20)

    result = sqlite_db.run("check")
    assert result.exit_code == 0, result.output
    free = line(result.stdout, "free space")
    path = f"{sqlite_db.tmp}/mq.db"
    assert re.match(rf"warn\s+free space\s+{path} holds \d+ MB of free pages", free)
    command = re.search(r"run (sqlite3 \S+ VACUUM) when", free).group(1)
    assert command == f"sqlite3 {path} VACUUM"
    subprocess.run(shlex.split(command), check=True, timeout=60)

    result = sqlite_db.run("check")
    assert line(result.stdout, "free space").startswith("ok "), result.stdout
    assert sqlite_db.sql("SELECT count(*) FROM mq_messages") == [(10,)]


def test_the_thresholds_have_floors_and_ages():
    """The judgement alone, for what the shared servers cannot show (autovacuum is off
    on the shared PostgreSQL; a day-old table cannot be made in a test)."""
    mb = 2**20
    # PostgreSQL: (ok, warn) for dead rows by age of the last vacuum and autovacuum on/off
    assert bloat.pg_dead_rows("t", 0, 9_000, None, autovacuum=False)[1:4:2] == (True, False)
    assert bloat.pg_dead_rows("t", 0, 40_000, None, autovacuum=False)[1] is False
    assert bloat.pg_dead_rows("t", 0, 40_000, None)[1:4:2] == (True, True)  # not visited yet
    assert bloat.pg_dead_rows("t", 0, 40_000, 60.0)[1:4:2] == (True, False)  # a busy table
    assert bloat.pg_dead_rows("t", 0, 40_000, 1200.0)[1:4:2] == (True, True)
    assert bloat.pg_dead_rows("t", 30_000, 40_000, 1200.0)[1:4:2] == (True, False)
    assert bloat.pg_dead_rows("t", 30_000, 40_000, 7200.0)[1] is False
    assert bloat.pg_statistics("t", 0, 60_000, None)[3] is False  # autoanalyze will come
    assert bloat.pg_statistics("t", 0, 60_000, None, autovacuum=False)[3] is True
    assert bloat.pg_statistics("t", 0, 60_000, 7200.0)[3] is True
    assert bloat.pg_statistics("t", 40_000, 60_000, 7200.0)[3] is False
    # MariaDB and SQLite: a small file never warns, a big one more than half free does
    assert bloat.mysql_free_space("t", 1 * mb, 90 * mb)[3] is False
    assert bloat.mysql_free_space("t", 150 * mb, 140 * mb)[3] is False
    assert bloat.mysql_free_space("t", 90 * mb, 110 * mb)[3] is True
    assert bloat.mysql_statistics("t", 100, 60_000, 7200.0)[3] is True
    assert bloat.mysql_statistics("t", 100, 60_000, 60.0)[3] is False
    assert bloat.sqlite_free_pages("f", 25_000, 24_000, 4096)[3] is False  # 94 MB free
    assert bloat.sqlite_free_pages("f", 60_000, 40_000, 4096)[3] is True
