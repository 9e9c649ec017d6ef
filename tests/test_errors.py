"""Errors: the documented exit code, one or two lines on stderr, no traceback
without -v, and never a password."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mq_cli.cli.main import cli

PASSWORD = "s3cret"
COMMANDS = [["stats"], ["stats", "--json"], ["enqueue", "-q", "q", "{}"], ["init"]]


def mq(*args: str, input: str | bytes | None = None, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


def assert_clean_error(result, code: int, verbose: bool = False) -> None:
    assert result.exit_code == code, result.output
    assert PASSWORD not in result.stdout
    assert PASSWORD not in result.stderr
    assert result.stderr.strip(), "an error says what went wrong"
    if not verbose:
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) <= 2, result.stderr


# -- the database cannot be reached ---------------------------------------------


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "-v"])
def test_unreachable_database(args: list[str], verbose: bool):
    url = f"mysql://root:{PASSWORD}@127.0.0.1:1/test"
    result = mq(*(["-v"] if verbose else []), "-d", url, *args)
    assert_clean_error(result, 3, verbose)
    last = result.stderr.strip().splitlines()[-1]
    assert "127.0.0.1:1" in last
    assert "cannot connect" in last
    if not verbose:
        assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_database_from_the_environment():
    result = mq("stats", env={"MQ_DATABASE_URL": f"mysql://mq:{PASSWORD}@127.0.0.1:1/app"})
    assert_clean_error(result, 3)
    assert "127.0.0.1:1" in result.stderr


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "-v"])
def test_access_denied(mysql_db, verbose: bool):
    url = mysql_db.url.replace("://root@", f"://root:{PASSWORD}@", 1)
    assert PASSWORD in url, "the test server's URL is expected to be root without a password"
    result = mq(*(["-v"] if verbose else []), "-d", url, "stats")
    assert_clean_error(result, 3, verbose)
    assert "access denied" in result.stderr
    assert "password is not shown" in result.stderr


def test_ssl_ca_file_that_is_not_a_certificate(mysql_db, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    result = mq("-d", f"{mysql_db.url}?ssl_ca={ca}", "stats")
    assert result.exit_code in (2, 3), result.output
    assert "internal error" not in result.stderr
    assert "ca.pem" in result.stderr or "certificate" in result.stderr
    assert_clean_error(result, result.exit_code)


def test_database_that_does_not_exist(mysql_db):
    url = mysql_db.url.rsplit("/", 1)[0] + "/mqt_no_such_database"
    result = mq("-d", url, "stats")
    assert_clean_error(result, 3)
    assert "does not exist" in result.stderr


def test_sqlite_file_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = mq("-d", f"sqlite:///{blocker}/sub/mq.db", "enqueue", "-q", "q", "{}")
    assert_clean_error(result, 3)
    assert str(blocker) in result.stderr


def test_sqlite_file_that_is_not_a_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just some text" * 200)
    result = mq("-d", f"sqlite:///{junk}", "stats")
    assert_clean_error(result, 3)
    assert str(junk) in result.stderr


# -- bad URLs and flags are usage errors -----------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"oracle://root:{PASSWORD}@127.0.0.1/app",
        f"postgres://root:{PASSWORD}@127.0.0.1/app?colour=red",
        f"postgresql://root:{PASSWORD}@127.0.0.1",
        f"postgresql://root:{PASSWORD}@127.0.0.1/app?sslmode=sometimes",
        f"root:{PASSWORD}@127.0.0.1/app",  # no scheme at all
        f"mysql://root:{PASSWORD}@127.0.0.1:99999/app",
        f"mysql://root:{PASSWORD}@127.0.0.1/app?colour=red",
        f"mysql://root:{PASSWORD}@127.0.0.1/app?connect_timeout=soon",
        f"mysql://root:{PASSWORD}@127.0.0.1",
        "sqlite://",
        "sqlite:///",
        "",
    ],
)
@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "-v"])
def test_bad_database_url_is_exit_2(url: str, verbose: bool, tmp_path):
    result = mq(*(["-v"] if verbose else []), "-d", url, "enqueue", "-q", "q", "{}")
    if url == "":
        # An empty --database is no override: the zero-config default is used.
        assert result.exit_code == 0, result.output
        return
    assert_clean_error(result, 2, verbose)
    assert "URL" in result.stderr


def test_bad_scheme_names_the_schemes():
    result = mq("-d", "oracle://h/app", "stats")
    assert_clean_error(result, 2)
    for scheme in ("mysql://", "postgresql://", "sqlite://"):
        assert scheme in result.stderr


@pytest.mark.parametrize(
    "args, named",
    [
        (["--bogus", "stats"], "--bogus"),
        (["stats", "--bogus"], "--bogus"),
        (["enqueue", "-q", "q", "--bogus", "{}"], "--bogus"),
        (["no-such-command"], "no-such-command"),
        (["enqueue", "{}"], "--queue"),  # -q is required
        (["-q", "q", "stats"], "-q"),  # -q is not a global option
        (["stats", "-q"], "-q"),
        (["stats", "--json=yes"], "--json"),
    ],
)
def test_bad_usage_is_exit_2(args: list[str], named: str, tmp_path):
    result = mq("-d", f"sqlite:///{tmp_path}/mq.db", *args)
    assert result.exit_code == 2, result.output
    # Every error is `mq:` lines: what is wrong, then where the help is.
    lines = result.stderr.splitlines()
    assert all(line.startswith("mq: ") for line in lines), result.stderr
    assert len(lines) == 2 and named in lines[0] and "--help" in lines[1], result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert not (tmp_path / "mq.db").exists()


def test_version_and_help_are_exit_0():
    result = mq("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("mq ")
    assert mq("--help").exit_code == 0
    assert mq("-h").exit_code == 0


def test_verbose_shows_the_traceback(tmp_path):
    result = mq("-v", "-d", "mysql://root@127.0.0.1:1/test", "stats")
    assert result.exit_code == 3
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("mq: cannot connect")
