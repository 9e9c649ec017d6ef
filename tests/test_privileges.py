"""The least-privilege GRANTs the docs give are enough for every command, as written.

The SQL blocks are taken from docs/databases/privileges.md verbatim (found by their
`<!-- least-privilege: KIND, before|after mq init -->` markers); only the placeholders
the docs name are replaced (database, table, user or role names, passwords), so that
each run has its own. They run in the docs' order: the users, `mq init` as the admin,
the table GRANTs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mq_cli.core.dburl import parse_database_url
from mq_cli.host.runlog import denied_text
from tests.conftest import Db, _pg_connect

PAGE = Path(__file__).resolve().parent.parent / "docs" / "databases" / "privileges.md"
TEXT = PAGE.read_text()
BLOCK = re.compile(
    r"<!-- least-privilege: (\w+), (before|after) mq init -->\n```sql\n(.*?)```", re.S
)


def readme_blocks(kind: str) -> tuple[str, str]:
    """The page's (before `mq init`, after `mq init`) blocks for ``kind``."""
    found = {(k, when): text for k, when, text in BLOCK.findall(TEXT)}
    return found[(kind, "before")], found[(kind, "after")]


@dataclass
class Names:
    """One run's stand-ins for the page's placeholders."""

    database: str
    table: str
    admin: str
    role: str
    admin_password: str
    role_password: str

    def statements(self, block: str) -> list[str]:
        """``block``'s statements with the page's names replaced, and only those."""
        text = re.sub(r"--[^\n]*", "", block)  # comments
        for pattern, value in (
            (r"\bapp\b", self.database),
            (r"\bmq_messages", self.table),  # and its _meta, _runs, ...
            (r"\bmq_admin\b", self.admin),
            (r"\bmq\b", self.role),
            (r"'admin-secret'", f"'{self.admin_password}'"),
            (r"'secret'", f"'{self.role_password}'"),
        ):
            text = re.sub(pattern, value, text)
        return [part.strip() for part in text.split(";") if part.strip()]


@dataclass
class Setup:
    """The page's two users on one test database: ``admin`` ran `mq init`."""

    root: Db
    names: Names
    admin: Db
    role: Db
    created: list[str]  # the tables `mq init` made, as the server lists them

    def sql(self, statement: str, params: tuple = ()) -> list[tuple]:
        """As root / the superuser; ``{t}`` stands for this run's table, ``{2h ago}``
        for the database's time two hours ago."""
        statement = statement.replace("{t}", self.names.table)
        return self.root.sql(statement.replace("{2h ago}", self.root.now_sql(-7200)), params)

    def ok(self, *args: str, input: str | None = None) -> str:
        """``mq ARGS`` as the mq user: exit 0, and not a word of trouble."""
        result = self.role.run(*args, input=input)
        assert result.exit_code == 0, (args, result.output)
        assert result.stderr == "", (args, result.stderr)  # no warning, nothing at all
        assert not re.search(r"warning|could not", result.output, re.I), (args, result.output)
        assert self.names.role_password not in result.output
        return result.stdout


def _names(db: Db) -> Names:
    suffix = uuid.uuid4().hex[:8]
    return Names(
        database=parse_database_url(db.url).database or "",
        table=f"mqp_{suffix}",
        admin=f"mqa_{suffix}",
        role=f"mqd_{suffix}",
        admin_password=f"pw-a-{suffix}",
        role_password=f"pw-d-{suffix}",
    )


def _url(db: Db, user: str, password: str) -> str:
    s = parse_database_url(db.url)
    scheme = db.url.split("://", 1)[0]
    return f"{scheme}://{user}:{password}@{s.host}:{s.port}/{s.database}"


def _tables(db: Db, table: str) -> list[str]:
    if db.kind == "postgres":
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE %s"
    else:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE %s"  # noqa: E501
    return sorted(str(row[0]) for row in db.sql(sql, (f"{table}%",)))


@contextmanager
def setup_as_readme_says(db: Db, tmp_path: Path, skip: tuple[str, ...] = ()) -> Iterator[Setup]:
    """The page's blocks in its order; ``skip``: leave out the GRANTs that name these."""
    names = _names(db)
    before, after = readme_blocks(db.kind)
    admin = Db(db.kind, _url(db, names.admin, names.admin_password), tmp_path)
    role = Db(db.kind, _url(db, names.role, names.role_password), tmp_path)
    (tmp_path / "mq.yaml").write_text(
        f"table: {names.table}\n"
        "queues:\n"
        "  jobs: {handler: 'tests.jobs:noop', rate_limit: 1000/s}\n"
    )
    try:
        for statement in names.statements(before):
            db.sql(statement)  # as root / the superuser
        result = admin.run("init")
        assert result.exit_code == 0, result.output
        created = _tables(db, names.table)
        grants = [s for s in names.statements(after) if not any(x in s for x in skip)]
        for statement in grants:
            # PostgreSQL: as the tables' owner, as the page says; MariaDB: as root.
            (admin if db.kind == "postgres" else db).sql(statement)
        yield Setup(db, names, admin, role, created)
    finally:
        if db.kind == "postgres":
            conn = _pg_connect(db.url)  # the test's database: DROP OWNED works per database
            try:
                for who in (names.role, names.admin):
                    conn.execute(
                        f"DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{who}') "
                        f'THEN DROP OWNED BY "{who}"; DROP ROLE "{who}"; END IF; END $$'
                    )
            finally:
                conn.close()
        else:
            for who in (names.role, names.admin):
                db.sql(f"DROP USER IF EXISTS '{who}'@'%'")


@pytest.fixture(params=["mysql", "postgres"])
def server_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """A fresh, empty MariaDB or PostgreSQL database (no schema)."""
    yield request.getfixturevalue("mysql_db" if request.param == "mysql" else "pg_db")


def test_the_readme_names_every_table_mq_init_makes(server_db, tmp_path):
    with setup_as_readme_says(server_db, tmp_path) as setup:
        _, after = readme_blocks(server_db.kind)
        statements = " ".join(setup.names.statements(after))
        granted = set(re.findall(rf"\b{setup.names.table}\w*", statements))
        assert granted == set(setup.created), (granted, setup.created)


def test_readme_grants_suffice(server_db, tmp_path):
    """Every command the mq user runs exits 0 and prints no warning; the run log works."""
    with setup_as_readme_says(server_db, tmp_path) as setup:
        ok = setup.ok
        ok("enqueue", "-q", "jobs", "1", "--unique-key", "k")
        ok("enqueue", "-q", "jobs", "2", "--delay", "1h")
        ok("enqueue", "-q", "jobs", "--lines", input="3\n4\n")
        ok("drain", "-q", "jobs")
        assert setup.sql("SELECT COUNT(*) FROM {t}_runs")[0][0] >= 1, "no run recorded"
        # The drain recorded the clock (clock-step detection needs the meta GRANT).
        assert setup.sql("SELECT name FROM {t}_meta WHERE name LIKE 'clock:%%'")
        ok("status")
        ok("status", "--json")
        ok("status", "--html", str(tmp_path / "status.html"))  # writes a backlog sample
        prom = tmp_path / "mq.prom"
        ok("stats", "--prometheus", str(prom))
        text = prom.read_text()
        assert re.search(r'^mq_succeeded_total\{queue="jobs"\} [1-9]', text, re.M), text
        assert re.search(r'^mq_duration_seconds_count\{queue="jobs"\} [1-9]', text, re.M), text
        # A stalled and a failed message, for gc to find.
        stalled, failed = (int(i) for i in ok("enqueue", "-q", "jobs", "5", "6").split())
        setup.sql(
            "UPDATE {t} SET status = 'processing', owner = 'gone', heartbeat_at = {2h ago} "
            "WHERE id = %s",
            (stalled,),
        )
        setup.sql("UPDATE {t} SET status = 'failed', error_count = 10 WHERE id = %s", (failed,))
        assert str(stalled) in ok("gc", "--stalled", "--json")
        assert "requeued 1 stalled" in ok("gc", "--stalled", "--requeue")
        assert str(failed) in ok("gc", "--errors", "--json")
        assert "deleted 1 failed" in ok("gc", "--errors", "--delete")
        ok("pause", "-q", "jobs")
        ok("drain", "-q", "jobs")  # paused: claims nothing
        ok("resume", "-q", "jobs")
        ok("drain", "-q", "jobs")
        ok("list", "--json")
        ok("purge", "-q", "jobs", "--yes")
        check = ok("check")
        problems = [line for line in check.splitlines() if not line.startswith("ok ")]
        assert not problems, check
        assert re.search(r"ok\s+run log\s+kept for", check), check
        if server_db.kind == "mysql":
            # InnoDB's change counter needs PROCESS: said, not warned about.
            assert re.search(r"ok\s+statistics\s+not checked: .*denied.*PROCESS", check), check
            assert re.search(r"ok\s+free space\s+\d+ KB free", check), check


def test_without_the_run_log_grants_every_command_says_so_alike(server_db, tmp_path):
    """A user left without the run log's GRANTs: one line, the same from every command,
    and no command that exits 0 as if all were well (but the drain, which did its job)."""
    with setup_as_readme_says(server_db, tmp_path, skip=("_runs", "_rollup")) as setup:
        mq, t = setup.role, setup.names.table
        said = denied_text("SELECT", [f"{t}_runs", f"{t}_rollup"])
        assert mq.run("enqueue", "-q", "jobs", "1", "2").exit_code == 0

        drain = mq.run("drain", "-q", "jobs")
        assert drain.exit_code == 0, drain.output  # the messages ran: the drain did its job
        assert said in drain.stderr and drain.stderr.count("run log:") == 1, drain.stderr
        assert setup.sql("SELECT COUNT(*) FROM {t}")[0][0] == 0

        status = mq.run("status")
        assert status.exit_code == 3 and said in status.stderr, status.output

        prom = tmp_path / "mq.prom"
        stats = mq.run("stats", "--prometheus", str(prom))
        assert stats.exit_code == 3 and said in stats.stderr, stats.output
        text = prom.read_text()  # the gauges still come, the run log's metrics do not
        assert 'mq_messages{queue="jobs",state="ready"} 0' in text, text
        assert "mq_succeeded_total" not in text, text

        check = mq.run("check")
        assert check.exit_code == 1, check.output
        line = next(x for x in check.stdout.splitlines() if re.match(r"\w+\s+run log\s", x))
        assert line.startswith("FAIL") and said.removeprefix("run log: ") in line, check.stdout
