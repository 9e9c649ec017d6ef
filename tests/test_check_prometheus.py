"""`mq check` after a deploy, and `mq stats --prometheus` for monitoring."""

from __future__ import annotations

import json
import os
import re

from click.testing import CliRunner

from mq_cli.cli.main import cli
from mq_cli.core.version import SCHEMA_VERSION


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env or {}, catch_exceptions=False)


def test_check_passes_on_a_good_setup(db, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:record'}\n  outbox: {}\n"
    )
    result = db.run("check")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("ok") and "config" in line for line in lines)
    assert any("database" in line and "reachable" in line for line in lines)
    assert any("schema" in line and f"version {SCHEMA_VERSION}" in line for line in lines)
    assert any(line.startswith("ok") and "database mode" in line for line in lines)
    assert any("queue jobs" in line and "importable" in line for line in lines)
    # No drain ran yet: the lock dir does not exist, and the check leaves it so.
    assert any(
        line.startswith("ok")
        and "lock_dir" in line
        and "created (mode 700) by the first drain" in line
        for line in lines
    ), result.stdout


def test_check_finds_each_problem(db, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  jobs: {handler: 'tests.jobs:missing'}\n  mail: {handler: 'exec:/no/such'}\n"
    )
    result = db.run("check")
    assert result.exit_code == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 2
    assert any("queue jobs" in line for line in failed)
    assert any("queue mail" in line for line in failed)


def test_check_warns_about_standard_library_handlers(sqlite_db, tmp_path):
    (tmp_path / "reexport.py").write_text("from subprocess import getoutput as run\n")
    (tmp_path / "mq.yaml").write_text(
        "queues:\n"
        "  a: {handler: 'os:system'}\n"
        "  b: {handler: 'builtins:print'}\n"
        "  c: {handler: 'reexport:run'}\n"  # the standard library under another name
        "  d: {handler: 'json.decoder:JSONDecoder.decode'}\n"
        "  mine: {handler: 'tests.jobs:record'}\n"
        "defaults: {on_failed: 'os:abort'}\n"
    )
    result = sqlite_db.run("init")
    result = sqlite_db.run("check")
    assert result.exit_code == 0, result.output  # a warning, not a failure
    lines = result.stdout.splitlines()
    warned = [line for line in lines if line.startswith("warn")]
    for queue, origin in (("a", "(os)"), ("b", "(builtins)"), ("c", "(subprocess)"),
                          ("d", "(json.decoder)")):  # fmt: skip
        assert any(f"queue {queue} " in line and "handler" in line and origin in line
                   for line in warned), (queue, result.stdout)  # fmt: skip
    assert sum("on_failed os:abort" in line for line in warned) == 5
    assert any(line.startswith("ok") and "queue mine" in line and "importable" in line
               for line in lines)  # fmt: skip
    assert not any("queue mine" in line and "handler tests.jobs" in line for line in warned)


def test_check_reports_missing_schema(mysql_db):
    result = mysql_db.run("check")
    assert result.exit_code == 1
    assert re.search(r"FAIL\s+schema.*mq init", result.stdout)


def test_check_looks_at_the_lock_dir_without_creating_it(sqlite_db, tmp_path):
    lock_dir = tmp_path / "fresh" / "locks"
    (tmp_path / "mq.yaml").write_text(
        f"lock_dir: {lock_dir}\nqueues:\n  jobs: {{handler: 'tests.jobs:noop'}}\n"
    )
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("check")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if re.match(r"\w+\s+lock_dir\s", x))
    assert line.startswith("ok") and "will be created (mode 700) by the first drain" in line
    assert not (tmp_path / "fresh").exists()  # a check changes nothing
    assert sqlite_db.run("drain", "-q", "jobs").exit_code == 0
    assert lock_dir.is_dir()
    line = next(
        x for x in sqlite_db.run("check").stdout.splitlines() if re.match(r"\w+\s+lock_dir\s", x)
    )
    assert line.startswith("ok") and f"{lock_dir} usable" in line


def test_check_fails_a_lock_dir_that_cannot_be_created(sqlite_db, tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "mq.yaml").write_text(f"lock_dir: {tmp_path / 'file' / 'locks'}\n")
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("check")
    assert result.exit_code == 1, result.output
    line = next(x for x in result.stdout.splitlines() if re.match(r"\w+\s+lock_dir\s", x))
    assert line.startswith("FAIL") and "cannot create lock_dir" in line, line
    assert "is not a directory" in line and "set lock_dir in the config" in line


def test_check_reports_an_unreachable_database_with_exit_1(tmp_path):
    result = run("-d", "mysql://mq:s3cret@127.0.0.1:1/app", "check")
    assert result.exit_code == 1
    assert re.search(r"FAIL\s+database.*127\.0\.0\.1:1", result.stdout)
    assert "s3cret" not in result.output


def test_check_reports_bad_config(tmp_path):
    (tmp_path / "mq.yaml").write_text("queues:\n  jobs: {max_erors: 3}\n")
    result = run("check")
    assert result.exit_code == 1
    assert "max_erors" in result.stdout and "line 2" in result.stdout


def test_check_reports_a_readable_password(tmp_path, mysql_db):
    config = tmp_path / "mq.yaml"
    config.write_text("database:\n  host: 127.0.0.1\n  database: x\n  password: hunter2\n")
    os.chmod(config, 0o644)
    result = run("check")
    assert result.exit_code == 1
    assert re.search(r"FAIL\s+config file.*chmod 600", result.stdout)
    assert "hunter2" not in result.output


def test_check_reports_an_unusable_lock_dir(db, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "locks").symlink_to(target)
    (tmp_path / "mq.yaml").write_text(f"lock_dir: {tmp_path / 'locks'}\n")
    result = db.run("check")
    assert result.exit_code == 1
    assert re.search(r"FAIL\s+lock_dir.*symlink", result.stdout)


def test_check_bad_flag_is_exit_2(db):
    assert db.run("check", "--bogus").exit_code == 2


def parse_textfile(text: str) -> dict[tuple[str, tuple], float]:
    """A small parser of the Prometheus text format, enough to read it back."""
    samples: dict[tuple[str, tuple], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            assert line.startswith(("# HELP ", "# TYPE ")) or not line, line
            continue
        match = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        assert match, line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(2) or "")))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def test_prometheus_textfile(db, tmp_path):
    db.run("enqueue", "-q", "jobs", "1", "2", "3")
    db.run("enqueue", "-q", "jobs", "--delay", "1h", "4")
    out = tmp_path / "metrics" / "mq.prom"
    out.parent.mkdir()
    result = db.run("stats", "--prometheus", str(out))
    assert result.exit_code == 0, result.output
    samples = parse_textfile(out.read_text())
    key = lambda state: ("mq_messages", (("queue", "jobs"), ("state", state)))  # noqa: E731
    assert samples[key("ready")] == 3
    assert samples[key("delayed")] == 1
    assert samples[key("failed")] == 0
    assert samples[("mq_oldest_ready_seconds", (("queue", "jobs"),))] >= 0
    assert "mq_stats_timestamp_seconds" in {name for name, _ in samples}
    # written atomically: no temporary file left beside it
    assert sorted(p.name for p in out.parent.iterdir()) == ["mq.prom"]
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_version_prints_package_and_schema_version():
    result = run("--version")
    assert result.exit_code == 0
    assert re.fullmatch(rf"mq \d+\.\d+\.\d+ \(schema {SCHEMA_VERSION}\)\n", result.stdout)


def test_stats_json_is_unchanged_by_prometheus(db, tmp_path):
    db.run("enqueue", "-q", "jobs", "1")
    out = tmp_path / "mq.prom"
    result = db.run("stats", "--json", "--prometheus", str(out))
    assert json.loads(result.stdout)["jobs"]["ready"] == 1
    assert out.exists()


def test_check_warns_about_a_handler_found_only_in_the_current_directory(db, tmp_path, monkeypatch):
    module = f"cwdonly_{os.getpid()}_{db.kind}"
    (tmp_path / f"{module}.py").write_text("def run(payload):\n    return None\n")
    (tmp_path / "mq.yaml").write_text(f"queues:\n  jobs: {{handler: '{module}:run'}}\n")
    result = db.run("check")
    assert result.exit_code == 0, result.output  # a warning, not a failure
    line = next(x for x in result.stdout.splitlines() if "queue jobs" in x)
    assert line.startswith("warn") and f"PYTHONPATH={tmp_path}" in line
    # as the crontab would set it: no warning
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    again = db.run("check")
    line = next(x for x in again.stdout.splitlines() if "queue jobs" in x)
    assert line.startswith("ok") and "importable" in line
