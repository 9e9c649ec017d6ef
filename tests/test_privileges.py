"""The least-privilege GRANTs the README gives are enough for every command."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from click.testing import CliRunner

from mq_cli.cli.main import cli
from mq_cli.core.dburl import parse_database_url

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_grants_suffice(mysql_db, tmp_path):
    s = parse_database_url(mysql_db.url)
    block = re.search(r"```sql\n(GRANT .*?)```", README, re.DOTALL).group(1)
    suffix = uuid.uuid4().hex[:8]
    admin, drainer = f"mqa_{suffix}", f"mqd_{suffix}"
    statements = [
        line.split("--")[0].strip().rstrip(";")
        .replace("app.", f"`{s.database}`.")
        .replace("'mq_admin'@'%'", f"'{admin}'@'%'")
        .replace("'mq'@'%'", f"'{drainer}'@'%'")
        for line in block.strip().splitlines()
        if line.split("--")[0].strip()  # a comment line is no statement
    ]  # fmt: skip
    mysql_db.sql(f"CREATE USER '{admin}'@'%' IDENTIFIED BY 'pw-a'")
    mysql_db.sql(f"CREATE USER '{drainer}'@'%' IDENTIFIED BY 'pw-d'")
    try:
        for statement in statements[:1]:
            mysql_db.sql(statement)
        as_admin = f"mysql://{admin}:pw-a@{s.host}:{s.port}/{s.database}"
        as_drainer = f"mysql://{drainer}:pw-d@{s.host}:{s.port}/{s.database}"
        runner = CliRunner()

        def mq(url: str, *args: str, input: str | None = None):
            return runner.invoke(cli, ["-d", url, *args], input=input, env={"MQ_CONFIG": None})

        assert mq(as_admin, "init").exit_code == 0
        for statement in statements[1:]:  # the tables exist now
            mysql_db.sql(statement)
        (tmp_path / "mq.yaml").write_text(
            "queues:\n  jobs: {handler: 'tests.jobs:noop', retry_delay: 0, max_errors: 1}\n"
        )
        assert mq(as_drainer, "enqueue", "-q", "jobs", "1", "2", "--unique-key", "k").exit_code == 0
        assert mq(as_drainer, "enqueue", "-q", "jobs", "--lines", input="3\n4\n").exit_code == 0
        assert mq(as_drainer, "drain", "-q", "jobs").exit_code == 0
        assert mq(as_drainer, "stats", "--json").exit_code == 0
        assert mq(as_drainer, "enqueue", "-q", "jobs", "5").exit_code == 0
        assert mq(as_drainer, "gc", "--stalled", "--requeue").exit_code == 0
        assert mq(as_drainer, "gc", "--errors", "--delete").exit_code == 0
        assert mq(as_drainer, "purge", "-q", "jobs", "--yes").exit_code == 0
        # The drains recorded the clock (clock-step detection needs the meta GRANT).
        recorded = mysql_db.sql("SELECT name FROM mq_messages_meta WHERE name LIKE 'clock:%'")
        assert recorded, "no clock record"
        result = mq(as_drainer, "check")
        assert result.exit_code == 0, result.output
        assert "pw-d" not in result.output
        # InnoDB's change counter needs PROCESS: said, not warned about.
        assert re.search(r"ok\s+statistics\s+not checked: .*denied.*PROCESS", result.stdout), (
            result.stdout
        )
        assert re.search(r"ok\s+free space\s+\d+ KB free", result.stdout), result.stdout
    finally:
        mysql_db.sql(f"DROP USER IF EXISTS '{admin}'@'%'")
        mysql_db.sql(f"DROP USER IF EXISTS '{drainer}'@'%'")
