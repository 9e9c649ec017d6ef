"""When the queue table has grown in a way that costs, for `mq check`.

Every acknowledged message is a deleted row. What a deleted row leaves behind
differs by database: on PostgreSQL a dead row version that claims walk past
until VACUUM removes it; on InnoDB and SQLite free space in the file, which the
database reuses but never gives back by itself. And a table that changed many
times over since its statistics were taken is planned from figures that no
longer hold. Each dialect reads its own figures (statements in
<dialect>/<dialect>.sql); the judgement and the command that fixes each are here, so
the thresholds of the three sit side by side.

A line is a warning (shown as `warn`, exit 0) when the fix is routine
maintenance; it fails the check only where something that should run by itself
has not for an hour (PostgreSQL's autovacuum). Every threshold has a floor, so a
fresh or small table is always quiet.
"""

from __future__ import annotations

#: dead row versions below this never count: autovacuum (threshold 1,000 + 1 % with
#: mq's storage parameters) clears a few thousand within a minute of a burst
DEAD_ROWS = 10_000
#: dead rows outnumbering the live ones with no vacuum for this long: autovacuum is not
#: running on the table (off, starved or stopped), which fails the check
VACUUM_AGE = 3600.0
#: ... and twice the live ones with no vacuum for this long is worth a warning already:
#: autovacuum wakes each table once a minute (autovacuum_naptime), so ten of them
#: missed is no longer a busy table between two runs
VACUUM_WARN_AGE = 600.0
#: changes since the statistics were taken: above this and twice the live rows, with
#: no ANALYZE for ANALYZE_AGE, the table has turned over twice since the planner last
#: counted it, and what should have analyzed it (autoanalyze, InnoDB's auto recalc:
#: both after 10 % of the rows changed) has not for an hour
STALE_CHANGES = 10_000
ANALYZE_AGE = 3600.0
#: free space in the file below this is never worth a rebuild (InnoDB alone keeps a
#: few MB of extents ahead of a growing table); above it, a file more than half free
#: warns (InnoDB counts the free pages inside the table's own extents as used: after
#: a drained burst "used" stays several MB for a hundred rows, so a stricter ratio
#: would hardly ever fire)
FREE_BYTES = 100 * 2**20

Found = tuple[str, bool, str, bool]


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _mb(size: float) -> str:
    if size < 2**20:
        return f"{size / 2**10:.0f} KB"
    if size < 2**30:
        return f"{size / 2**20:.0f} MB"
    return f"{size / 2**30:.1f} GB"


def pg_dead_rows(
    table: str,
    live: int,
    dead: int,
    since_vacuum: float | None,
    size: int = 0,
    autovacuum: bool = True,
) -> Found:
    """Dead row versions against live ones, the last VACUUM (seconds, None: never), and
    the table's size with its indexes, shown (it shrinks only by VACUUM FULL, which
    locks the table: not worth naming for space that fills again). ``autovacuum``: on
    for the server and the table. Never vacuumed fails only with it off: with it on,
    a new table's first burst waits up to a minute for its first visit (measured: 65-85
    s for 20,000 messages drained on a fresh table), which is a warning at most."""
    live, dead = int(live), int(dead)
    if since_vacuum is None:
        failed = dead > max(DEAD_ROWS, live) and not autovacuum
    else:
        failed = dead > max(DEAD_ROWS, live) and since_vacuum > VACUUM_AGE
    late = since_vacuum is None or since_vacuum > VACUUM_WARN_AGE
    if not failed and not (dead > max(DEAD_ROWS, 2 * live) and late):
        return (
            "dead rows", True,
            f"{dead} dead, {live} live row versions, {_mb(size)} with indexes", False,
        )  # fmt: skip
    if not autovacuum:
        why = "autovacuum is off for it (the server's autovacuum or the table's autovacuum_enabled)"
    elif failed:
        why = "autovacuum has not run on it for an hour: check that it runs"
    elif since_vacuum is None:
        why = "autovacuum has not visited it yet (about once a minute)"
    else:
        why = "autovacuum is behind"
    return (
        "dead rows", not failed,
        f"table {table} ({_mb(size)} with indexes) holds {dead} dead row versions for "
        f"{live} live ones, last vacuumed {_ago(since_vacuum)}: claims walk past them, "
        f"{why}; run VACUUM (ANALYZE) {table}; if they stay, something holds the vacuum "
        "horizon (the transactions, prepared transactions and replication slots lines say "
        "what)",
        not failed,
    )  # fmt: skip


def pg_statistics(
    table: str, live: int, changes: int, since_analyze: float | None, autovacuum: bool = True
) -> Found:
    """Rows changed since the last ANALYZE (``since_analyze`` seconds ago, None: never);
    never analyzed counts only with autovacuum off (with it on, the first visit comes)."""
    stale = not autovacuum if since_analyze is None else since_analyze > ANALYZE_AGE
    if changes > max(STALE_CHANGES, 2 * live) and stale:
        why = "autovacuum is off for it" if not autovacuum else "autovacuum's analyze has not"
        return (
            "statistics", True,
            f"{changes} row changes since table {table} was last analyzed "
            f"({_ago(since_analyze)}), for {live} live rows: the planner works from stale "
            f"row counts ({why}); run ANALYZE {table}",
            True,
        )  # fmt: skip
    return ("statistics", True, f"{changes} row changes since the last ANALYZE", False)


def mysql_free_space(table: str, used: int, free: int, galera: bool = False) -> Found:
    """InnoDB's free space in the table's file (DATA_FREE) against what its rows and
    indexes use (DATA_LENGTH + INDEX_LENGTH, as of the last statistics)."""
    if free > max(FREE_BYTES, used):
        cluster = " (on Galera every node rebuilds it at once)" if galera else ""
        return (
            "free space", True,
            f"table {table}: its file holds {_mb(free)} free, left by deleted rows, for "
            f"{_mb(used)} of rows and indexes: run OPTIMIZE TABLE {table} (it rebuilds the "
            f"table, online on InnoDB, and needs free disk for the copy){cluster}",
            True,
        )  # fmt: skip
    return ("free space", True, f"{_mb(free)} free in the table's file, {_mb(used)} used", False)


def mysql_statistics(table: str, rows: int, changes: int, since_analyze: float | None) -> Found:
    """Rows changed since InnoDB last took the table's statistics (MODIFIED_COUNTER)."""
    if changes > max(STALE_CHANGES, 2 * rows) and (
        since_analyze is None or since_analyze > ANALYZE_AGE
    ):
        return (
            "statistics", True,
            f"{changes} row changes since table {table}'s statistics were taken "
            f"({_ago(since_analyze)}), for about {rows} rows: the optimizer works from stale "
            f"row counts; run ANALYZE TABLE {table} (innodb_stats_auto_recalc or the "
            "table's STATS_AUTO_RECALC is off?)",
            True,
        )  # fmt: skip
    return ("statistics", True, f"{changes} row changes since the last statistics", False)


def sqlite_free_pages(path: str, pages: int, free: int, page_size: int) -> Found:
    """The database file's free pages (PRAGMA freelist_count) against its size."""
    free_bytes, used = free * page_size, (pages - free) * page_size
    if free_bytes > max(FREE_BYTES, used):
        return (
            "free space", True,
            f"{path} holds {_mb(free_bytes)} of free pages, left by deleted rows, for "
            f"{_mb(used)} in use: run sqlite3 {path} VACUUM when no drain or producer "
            "writes (it rewrites the file, needs free disk as large as the file, and holds "
            "the write lock meanwhile)",
            True,
        )  # fmt: skip
    return ("free space", True, f"{_mb(free_bytes)} of free pages, {_mb(used)} used", False)
