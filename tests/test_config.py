"""Configuration: where it is found, what it inherits, and how it says what is wrong.

Most tests need no database: `mq init --print-sql` reads the config (its
`table:` shows which file won) and touches nothing. Where the database matters,
a SQLite file in tmp_path or a fresh MariaDB database is used.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

import mq_cli
from mq_cli.cli.main import cli
from mq_cli.core.dburl import parse_database_url
from tests.conftest import cannot_run_here


def mq(*args: str, input: str | bytes | None = None, env: dict | None = None):
    """Run the CLI in the test's isolated environment (no MQ_CONFIG, no MQ_DATABASE_URL)."""
    return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


def write(path: Path, text: str, mode: int = 0o600) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def sqlite_url(tmp_path: Path, name: str = "mq.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def printed_table(result) -> str:
    """The table name `init --print-sql` wrote its CREATE TABLE for."""
    assert result.exit_code == 0, result.output
    first = next(ln for ln in result.stdout.splitlines() if "CREATE TABLE" in ln)
    return first.split("EXISTS", 1)[1].strip(' "`(')


# -- lookup order -------------------------------------------------------------


def test_lookup_order_first_match_wins(tmp_path: Path):
    db = sqlite_url(tmp_path)
    flag = write(tmp_path / "flag.yaml", f"database: {db}\ntable: from_flag\n")
    env = write(tmp_path / "env.yaml", f"database: {db}\ntable: from_env\n")
    cwd = write(tmp_path / "mq.yaml", f"database: {db}\ntable: from_cwd\n")
    xdg = write(
        tmp_path / "xdg-config" / "mq" / "config.yaml", f"database: {db}\ntable: from_xdg\n"
    )

    both = mq("--config", flag, "init", "--print-sql", env={"MQ_CONFIG": env})
    assert printed_table(both) == "from_flag"
    assert printed_table(mq("-c", flag, "init", "--print-sql")) == "from_flag"
    assert printed_table(mq("init", "--print-sql", env={"MQ_CONFIG": env})) == "from_env"
    assert printed_table(mq("init", "--print-sql")) == "from_cwd"
    os.remove(cwd)
    assert printed_table(mq("init", "--print-sql")) == "from_xdg"
    os.remove(xdg)
    assert printed_table(mq("init", "--print-sql")) == "mq_messages"


def test_xdg_config_home_unset_means_home_dot_config(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write(tmp_path / "home" / ".config" / "mq" / "config.yaml", "table: from_home\n")
    assert printed_table(mq("init", "--print-sql")) == "from_home"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_missing_explicit_config_is_exit_2(tmp_path: Path, how: str):
    missing = str(tmp_path / "nope.yaml")
    if how == "flag":
        result = mq("-c", missing, "stats")
    else:
        result = mq("stats", env={"MQ_CONFIG": missing})
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr
    assert "not found" in result.stderr
    assert not (tmp_path / "xdg-data").exists()  # fell back to nothing


def test_database_flag_and_env_override_the_file(tmp_path: Path):
    write(tmp_path / "mq.yaml", f"database: {sqlite_url(tmp_path, 'file.db')}\n")

    result = mq("--database", sqlite_url(tmp_path, "flag.db"), "init")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "flag.db").exists()
    assert not (tmp_path / "file.db").exists()

    result = mq("init", env={"MQ_DATABASE_URL": sqlite_url(tmp_path, "env.db")})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env.db").exists()
    assert not (tmp_path / "file.db").exists()

    # The flag beats the environment variable.
    result = mq(
        "-d", sqlite_url(tmp_path, "flag2.db"), "init",
        env={"MQ_DATABASE_URL": sqlite_url(tmp_path, "env2.db")},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "flag2.db").exists()
    assert not (tmp_path / "env2.db").exists()

    result = mq("init")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "file.db").exists()


def test_override_keeps_the_rest_of_the_file(tmp_path: Path):
    write(tmp_path / "mq.yaml", "database: sqlite:////nonexistent/x.db\ntable: jobs\n")
    result = mq("-d", sqlite_url(tmp_path), "init")
    assert result.exit_code == 0, result.output
    assert "jobs" in result.stdout


def test_empty_config_file_means_defaults(tmp_path: Path):
    write(tmp_path / "mq.yaml", "")
    assert printed_table(mq("init", "--print-sql")) == "mq_messages"
    write(tmp_path / "mq.yaml", "# only a comment\n")
    assert printed_table(mq("init", "--print-sql")) == "mq_messages"


# -- defaults inherited by queues ---------------------------------------------

INHERIT = """\
database: {db}
defaults:
  format: text
  max_errors: 3
  retry_delay: 500ms
  timeout: 0
queues:
  plain:
  strict:
    format: json
    max_errors: 7
    concurrency: 2
"""


def test_queues_inherit_defaults(tmp_path: Path):
    path = write(tmp_path / "mq.yaml", INHERIT.format(db=sqlite_url(tmp_path)))
    with mq_cli.connect(config=path) as conn:
        plain, strict, other = conn.queue("plain"), conn.queue("strict"), conn.queue("other")
    assert (plain.format, plain.max_errors, plain.retry_delay, plain.timeout) == ("text", 3, 0.5, 0)
    assert (strict.format, strict.max_errors, strict.retry_delay) == ("json", 7, 0.5)
    assert strict.concurrency == 2 and plain.concurrency == 1
    # A queue the config does not name gets the defaults too (producers need no config).
    assert (other.format, other.max_errors, other.retry_delay) == ("text", 3, 0.5)
    # Built-in defaults where neither says anything.
    assert plain.batch_size == 10 and plain.stalled_after == 3600


def test_inherited_format_decides_what_enqueue_accepts(tmp_path: Path):
    write(tmp_path / "mq.yaml", INHERIT.format(db=sqlite_url(tmp_path)))
    assert mq("enqueue", "-q", "plain", "not json").exit_code == 0
    assert mq("enqueue", "-q", "other", "not json").exit_code == 0
    result = mq("enqueue", "-q", "strict", "not json")
    assert result.exit_code == 1  # the input was rejected
    assert "argument 1" in result.stderr


# -- durations ----------------------------------------------------------------


@pytest.mark.parametrize(
    "written, seconds",
    [
        ("0", 0.0),
        ("45", 45.0),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("1.5h", 5400.0),
        ("'90'", 90.0),
        ("1h30m", 5400.0),  # what `mq list` prints ("available in 1h29m") can be given back
        ("2d04h", 187200.0),
        ("1m30s", 90.0),
    ],
)
def test_durations(tmp_path: Path, written: str, seconds: float):
    path = write(tmp_path / "mq.yaml", f"defaults:\n  timeout: {written}\n")
    with mq_cli.connect(config=path, database=sqlite_url(tmp_path)) as conn:
        assert conn.queue("q").timeout == seconds


@pytest.mark.parametrize(
    "written",
    ["5x", "-5", "-1s", "abc", "''", "30m1h", "1h1h", "5 minutes", "true", "[1]", "{a: 1}", ".nan",
     ".inf", "99999999999999999999d", "1e400", "36501d"],
)  # fmt: skip
def test_bad_durations_name_key_and_line(tmp_path: Path, written: str):
    write(tmp_path / "mq.yaml", f"queues:\n  q:\n    handler: x:y\n    timeout: {written}\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert "queues.q.timeout" in result.stderr
    assert "line 4" in result.stderr
    assert "Traceback" not in result.output


def test_stalled_after_must_be_positive(tmp_path: Path):
    write(tmp_path / "mq.yaml", "defaults:\n  stalled_after: 0\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2
    assert "line 2" in result.stderr and "defaults.stalled_after" in result.stderr


def test_retry_delay_max_below_retry_delay(tmp_path: Path):
    write(tmp_path / "mq.yaml", "defaults:\n  retry_delay: 1m\n  retry_delay_max: 30s\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2
    assert "defaults.retry_delay_max" in result.stderr and "line 3" in result.stderr


# -- unknown keys, wrong types, bad values --------------------------------------


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("queus:\n  a: {}\n", "queus", 1),
        ("defaults:\n  max_erors: 3\n", "defaults.max_erors", 2),
        ("queues:\n  mail:\n    handler: a:b\n    max_erors: 3\n", "queues.mail.max_erors", 4),
        ("database:\n  url: sqlite:///x.db\n  colour: red\n", "database.colour", 3),
        ("database:\n  url: mysql://h/d\n  ssl:\n    cafile: x\n", "database.ssl.cafile", 4),
    ],
)
def test_unknown_keys_name_key_and_line(tmp_path: Path, text: str, key: str, line: int):
    write(tmp_path / "mq.yaml", text)
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert key in result.stderr
    assert f"line {line}" in result.stderr
    assert "mq.yaml" in result.stderr
    assert "unknown key" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("defaults:\n  max_errors: ten\n", "defaults.max_errors", 2),
        ("defaults:\n  max_errors: 0\n", "defaults.max_errors", 2),
        ("defaults:\n  max_errors: 1.5\n", "defaults.max_errors", 2),
        ("defaults:\n  max_errors: true\n", "defaults.max_errors", 2),
        ("defaults:\n  format: xml\n", "defaults.format", 2),
        ("defaults:\n  batch_size: 0\n", "defaults.batch_size", 2),
        ("defaults:\n  concurrency: 1000\n", "defaults.concurrency", 2),
        ("queues:\n  a:\n    handler: 5\n", "queues.a.handler", 3),
        ("queues:\n  a:\n    handler: ''\n", "queues.a.handler", 3),
        ("\n\nqueues:\n  - a\n  - b\n", "queues", 3),
        ("queues:\n  a: 5\n", "queues.a", 2),
        ("defaults: 5\n", "defaults", 1),
        ("database: 5\n", "database", 1),
        ("lock_dir: [1]\n", "lock_dir", 1),
        ("table: 5\n", "table", 1),
        ("database:\n  host: h\n", "database.database", 1),
        ("database:\n  database: d\n  port: x\n", "database.port", 3),
        ("database:\n  database: d\n  port: 70000\n", "database.port", 3),
        ("database:\n  database: d\n  user: [a]\n", "database.user", 3),
        ("database:\n  database: d\n  ssl: maybe\n", "database.ssl", 3),
        ("database:\n  database: d\n  ssl:\n    verify: 'no'\n", "database.ssl.verify", 4),
        ("database:\n  database: d\n  ssl:\n    ca: /no/such/ca.pem\n", "database.ssl.ca", 4),
        ("database:\n  database: d\n  connect_timeout: soon\n", "database.connect_timeout", 3),
        ("database:\n  url: oracle://h/d\n", "database.url", 2),
        ("database:\n  url: postgres://h/d?colour=red\n", "database.url", 2),
        ("database:\n  kind: oracle\n  database: d\n", "database.kind", 2),
        ("database:\n  kind: postgresql\n  database: d\n  sslmode: maybe\n", "database.sslmode", 4),
        ("database:\n  database: d\n  sslmode: require\n", "database.sslmode", 3),
        ("database: sqlite://\n", "database", 1),
    ],
)
def test_wrong_types_and_values_name_key_and_line(tmp_path: Path, text: str, key: str, line: int):
    write(tmp_path / "mq.yaml", text)
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert key in result.stderr
    assert f"line {line}" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_config_must_be_a_mapping(tmp_path: Path):
    write(tmp_path / "mq.yaml", "- a\n- b\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2
    assert "mapping" in result.stderr


def test_nothing_is_changed_by_a_bad_config(tmp_path: Path):
    write(tmp_path / "mq.yaml", f"database: {sqlite_url(tmp_path)}\ndefaults:\n  max_erors: 3\n")
    result = mq("enqueue", "-q", "a", "{}")
    assert result.exit_code == 2
    assert not (tmp_path / "mq.db").exists()


# -- invalid YAML, duplicate keys ---------------------------------------------


@pytest.mark.parametrize(
    "text, named",
    [
        ("table: jobs\ndefaults:\n\tformat: json\n", "mq.yaml, line 3"),  # a tab
        ("table: jobs\nqueues:\n  a: 1\n b: 2\n", "mq.yaml, line 4"),  # bad indent
        ("table: jobs\nqueues:\n  a: [1, 2\n\n\n", "started on line 3"),  # noticed at the end
        ("table: jobs\nlock_dir: '/tmp\n", "started on line 2"),  # unclosed quote
    ],
)
def test_invalid_yaml_names_the_line(tmp_path: Path, text: str, named: str):
    write(tmp_path / "mq.yaml", text)
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert named in result.stderr
    assert "invalid YAML" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "value",
    [
        "!!python/name:os.system",
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/new:os.system [touch {marker}]",
        "!!binary notbase64",
    ],
)
def test_python_tags_are_a_config_error_and_run_nothing(tmp_path: Path, value: str):
    marker = tmp_path / "ran"
    write(tmp_path / "mq.yaml", f"table: jobs\nqueues:\n  a:\n    handler: {value}\n")
    (tmp_path / "mq.yaml").write_text(
        (tmp_path / "mq.yaml").read_text().replace("{marker}", str(marker))
    )
    for args in (["init", "--print-sql"], ["stats"], ["drain", "-q", "a"]):
        result = mq(*args)
        assert result.exit_code == 2, result.output
        assert "mq.yaml, line 4: " in result.stderr  # invalid YAML, or not a handler
        assert "internal error" not in result.output and "Traceback" not in result.output
    assert not marker.exists()


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("table: a\ndefaults: {}\ntable: b\n", "table", 3),
        ("queues:\n  a:\n    format: json\n  a:\n    format: text\n", "queues.a", 4),
        ("defaults:\n  format: json\n  format: text\n", "defaults.format", 3),
    ],
)
def test_duplicate_keys_are_errors(tmp_path: Path, text: str, key: str, line: int):
    write(tmp_path / "mq.yaml", text)
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert "duplicate key" in result.stderr
    assert key in result.stderr and f"line {line}" in result.stderr


# -- queue and table names ----------------------------------------------------


@pytest.mark.parametrize("name", ["a", "thumbnails", "A.b-c_9", "x" * 64])
def test_valid_queue_names(tmp_path: Path, name: str):
    result = mq("-d", sqlite_url(tmp_path), "enqueue", "-q", name, "{}")
    assert result.exit_code == 0, result.output
    result = mq("-d", sqlite_url(tmp_path), "stats", "--json")
    assert name in result.stdout


@pytest.mark.parametrize("name", ["", "bad name", "a/b", "a:b", "é", "x" * 65, "abc\n", "a;b"])
def test_invalid_queue_names_on_the_command_line(tmp_path: Path, name: str):
    for args in (["enqueue", "-q", name, "{}"], ["stats", "-q", name]):
        result = mq("-d", sqlite_url(tmp_path), *args)
        assert result.exit_code == 2, (args, result.output)
        assert "invalid queue name" in result.stderr
    assert not (tmp_path / "mq.db").exists()  # rejected before anything was opened


@pytest.mark.parametrize("name", ["'bad name'", "a/b", "'a\\n'", "x" * 65])
def test_invalid_queue_names_in_the_config(tmp_path: Path, name: str):
    write(tmp_path / "mq.yaml", f"queues:\n  ok: {{}}\n  {name}:\n    format: text\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2, result.output
    assert "invalid queue name" in result.stderr and "line 3" in result.stderr


@pytest.mark.parametrize(
    "name",
    ["mq-messages", "1mq", "mq messages", 'mq"x', "mq;drop", "mq`x", "'mq\\n'", "x" * 58, "''"],
)
def test_invalid_table_names(tmp_path: Path, name: str):
    write(tmp_path / "mq.yaml", f"database: {sqlite_url(tmp_path)}\ntable: {name}\n")
    result = mq("init")
    assert result.exit_code == 2, result.output
    assert "invalid table name" in result.stderr
    assert "line 2" in result.stderr
    assert not (tmp_path / "mq.db").exists()


def test_longest_table_name_works_on_every_backend(db):
    # MySQL allows 64-character identifiers, and mq names its index `<table>_unique`.
    name = "t" * 57
    path = write(db.tmp / "long.yaml", f"table: {name}\n")
    if db.kind == "postgres":
        # PostgreSQL's are at most 63 bytes: one character fewer, refused as a config error.
        result = db.run("init", env={"MQ_CONFIG": path})
        assert result.exit_code == 2, result.output
        assert "at most 56 characters" in result.stderr
        name = name[:-1]
        path = write(db.tmp / "long.yaml", f"table: {name}\n")
    result = db.run("init", env={"MQ_CONFIG": path})
    assert result.exit_code == 0, result.output
    result = db.run("enqueue", "-q", "a", "{}", env={"MQ_CONFIG": path})
    assert result.exit_code == 0, result.output
    assert db.sql(f"SELECT COUNT(*) FROM {name}") == [(1,)]  # noqa: S608 - test-made name


# -- database URLs ------------------------------------------------------------


def test_sqlite_url_three_slashes_is_relative_to_the_current_directory(tmp_path: Path):
    result = mq("-d", "sqlite:///rel.db", "init")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rel.db").exists()  # the tests run in tmp_path


def test_mariadb_scheme_and_unix_socket(mysql_db):
    s = parse_database_url(mysql_db.url)
    result = mq("-d", f"mariadb://{s.user}@{s.host}:{s.port}/{s.database}", "init")
    assert result.exit_code == 0, result.output
    socket = "/run/mysqld/mysqld.sock"
    if s.host not in ("127.0.0.1", "localhost") or not os.path.exists(socket):
        cannot_run_here("no local MariaDB socket")
    url = f"mysql://{s.user}@localhost/{s.database}?unix_socket={socket}"
    result = mq("-d", url, "enqueue", "-q", "q", "{}")
    assert result.exit_code == 0, result.output
    assert mysql_db.sql("SELECT COUNT(*) FROM mq_messages") == [(1,)]


# -- the database mapping -------------------------------------------------------


def test_mapping_with_url(tmp_path: Path):
    write(tmp_path / "mq.yaml", f"database:\n  url: {sqlite_url(tmp_path, 'm.db')}\n")
    result = mq("init")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m.db").exists()


@pytest.fixture
def mysql_user(mysql_db):
    """A MariaDB user with a password, allowed into the test's database."""
    database = parse_database_url(mysql_db.url).database
    user = "mqu_" + uuid.uuid4().hex[:10]
    password = "s3cret-" + uuid.uuid4().hex[:8]
    mysql_db.sql("CREATE USER %s@%s IDENTIFIED BY %s", (user, "%", password))
    try:
        mysql_db.sql(f"GRANT ALL ON `{database}`.* TO %s@%s", (user, "%"))
        yield {"user": user, "password": password, "database": database, "db": mysql_db}
    finally:
        mysql_db.sql("DROP USER IF EXISTS %s@%s", (user, "%"))


def _mapping(u: dict, secret_lines: str) -> str:
    s = parse_database_url(u["db"].url)
    return (
        f"database:\n  host: {s.host}\n  port: {s.port}\n  user: {u['user']}\n"
        f"  database: {u['database']}\n{secret_lines}"
    )


def _init_and_check(u: dict, path: str, env: dict | None = None) -> None:
    result = mq("-c", path, "init", env=env)
    assert result.exit_code == 0, result.output
    assert u["password"] not in result.output
    assert ("mq_messages",) in u["db"].sql("SHOW TABLES")


def test_mapping_host_port_user_database_password(tmp_path: Path, mysql_user):
    path = write(
        tmp_path / "c.yaml", _mapping(mysql_user, f"  password: '{mysql_user['password']}'\n")
    )
    _init_and_check(mysql_user, path)


def test_mapping_password_file(tmp_path: Path, mysql_user):
    secret = write(tmp_path / "secret", mysql_user["password"] + "\n")
    path = write(tmp_path / "c.yaml", _mapping(mysql_user, f"  password_file: {secret}\n"))
    _init_and_check(mysql_user, path)


def test_mapping_password_env(tmp_path: Path, mysql_user):
    path = write(tmp_path / "c.yaml", _mapping(mysql_user, "  password_env: MQ_TEST_PW\n"))
    _init_and_check(mysql_user, path, env={"MQ_TEST_PW": mysql_user["password"]})


def test_mapping_wrong_password_is_exit_3_without_the_password(tmp_path: Path, mysql_user):
    path = write(tmp_path / "c.yaml", _mapping(mysql_user, "  password: 'wr0ng-pass'\n"))
    for verbose in ([], ["-v"]):
        result = mq(*verbose, "-c", path, "init")
        assert result.exit_code == 3, result.output
        assert "access denied" in result.stderr
        assert "wr0ng-pass" not in result.stdout + result.stderr
    assert mysql_user["db"].sql("SHOW TABLES") == []


def test_mapping_password_env_not_set(tmp_path: Path, mysql_user):
    path = write(tmp_path / "c.yaml", _mapping(mysql_user, "  password_env: MQ_TEST_UNSET_PW\n"))
    result = mq("-c", path, "init")
    assert result.exit_code == 2
    assert "MQ_TEST_UNSET_PW" in result.stderr and "database.password_env" in result.stderr
    assert "line 6" in result.stderr


def test_mapping_password_file_missing(tmp_path: Path):
    write(tmp_path / "mq.yaml", "database:\n  database: d\n  password_file: /no/such/file\n")
    result = mq("init")
    assert result.exit_code == 2
    assert "/no/such/file" in result.stderr
    assert "database.password_file" in result.stderr and "line 3" in result.stderr


def test_mapping_only_one_password_source(tmp_path: Path):
    write(tmp_path / "mq.yaml", "database:\n  database: d\n  password: a\n  password_env: B\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2
    assert "password_env" in result.stderr and "line 4" in result.stderr


def test_mapping_password_must_be_quoted_text(tmp_path: Path):
    # Unquoted, YAML reads 0123 as the number 83: a silently wrong password.
    write(tmp_path / "mq.yaml", "database:\n  database: d\n  password: 0123\n")
    result = mq("init", "--print-sql")
    assert result.exit_code == 2
    assert "database.password" in result.stderr and "line 3" in result.stderr
    assert "0123" not in result.output and "83" not in result.output


def test_mapping_ssl_forms(tmp_path: Path):
    ca = write(tmp_path / "ca.pem", "not really a certificate\n")
    path = write(
        tmp_path / "a.yaml", f"database:\n  database: d\n  ssl:\n    ca: {ca}\n    verify: false\n"
    )
    settings = mq_cli.connect(config=path).config.database
    assert (settings.ssl, settings.ssl_ca, settings.ssl_verify) == (True, ca, False)
    path = write(tmp_path / "b.yaml", "database:\n  database: d\n  ssl: true\n")
    settings = mq_cli.connect(config=path).config.database
    assert (settings.ssl, settings.ssl_ca, settings.ssl_verify) == (True, None, True)
    path = write(tmp_path / "c.yaml", "database:\n  url: mysql://h/d\n  ssl: false\n")
    assert mq_cli.connect(config=path).config.database.ssl is False


def test_ssl_against_a_server_without_tls_is_a_clean_exit_3(tmp_path: Path, mysql_db):
    s = parse_database_url(mysql_db.url)
    write(
        tmp_path / "mq.yaml",
        f"database:\n  host: {s.host}\n  port: {s.port}\n  user: {s.user}\n"
        f"  database: {s.database}\n  ssl: true\n",
    )
    rows = mysql_db.sql("SHOW VARIABLES LIKE 'have_ssl'")
    if rows and rows[0][1] == "YES":
        cannot_run_here("this server speaks TLS")
    result = mq("init")
    assert result.exit_code == 3, result.output
    assert "SSL" in result.stderr
    assert "Traceback" not in result.output


# -- passwords: warned about, never shown ----------------------------------------

PASSWORD_CONFIGS = {
    "mapping password": "database:\n  database: d\n  password: s3cret\n",
    "url": "database: mysql://mq:s3cret@db1:3306/app\n",
    "mapping url": "database:\n  url: mysql://mq:s3cret@db1:3306/app\n",
}


@pytest.mark.parametrize("text", PASSWORD_CONFIGS.values(), ids=PASSWORD_CONFIGS.keys())
def test_world_readable_config_with_password_warns(tmp_path: Path, text: str):
    path = write(tmp_path / "mq.yaml", text, mode=0o644)
    result = mq("init", "--print-sql")
    assert result.exit_code == 0, result.output
    assert "readable by other users" in result.stderr
    assert "chmod 600 mq.yaml" in result.stderr
    assert "s3cret" not in result.stdout + result.stderr

    os.chmod(path, 0o600)
    result = mq("init", "--print-sql")
    assert result.exit_code == 0
    assert "readable" not in result.stderr


@pytest.mark.parametrize(
    "text",
    [
        "database: mysql://db1:3306/app\n",  # a port is not a password
        "database: mysql://mq@db1:3306/app\n",
        "database:\n  url: mysql://db1:3306/app\n  password_file: secret\n",
        "database: sqlite:////var/lib/mq/mq.db\n",
    ],
)
def test_world_readable_config_without_password_does_not_warn(tmp_path: Path, text: str):
    write(tmp_path / "secret", "s3cret\n")
    write(tmp_path / "mq.yaml", text, mode=0o644)
    result = mq("init", "--print-sql")
    assert result.exit_code == 0, result.output
    assert "readable" not in result.stderr
    assert "s3cret" not in result.output


BAD_CONFIGS_WITH_PASSWORD = {
    "unknown db key": "database:\n  url: mysql://root:s3cret@127.0.0.1:1/x\n  colour: red\n",
    "bad port": "database:\n  database: d\n  password: s3cret\n  port: x\n",
    "bad scheme": "database: postgres://root:s3cret@127.0.0.1/x\n",
    "no scheme": "database: root:s3cret@127.0.0.1/x\n",
    "no db name": "database: mysql://root:s3cret@127.0.0.1:3306\n",
    "bad url option": "database: mysql://root:s3cret@127.0.0.1/x?bogus=1\n",
    "bad url port": "database: mysql://root:s3cret@127.0.0.1:99999/x\n",
    "bad url timeout": "database: mysql://root:s3cret@127.0.0.1/x?connect_timeout=soon\n",
    "top key": "database: mysql://root:s3cret@127.0.0.1:1/x\nbogus: 1\n",
    "unreachable": "database: mysql://root:s3cret@127.0.0.1:1/x\n",
    "unreachable mapping": "database:\n  host: 127.0.0.1\n  port: 1\n  database: x\n  password: s3cret\n",
}


@pytest.mark.parametrize(
    "text", BAD_CONFIGS_WITH_PASSWORD.values(), ids=BAD_CONFIGS_WITH_PASSWORD.keys()
)
@pytest.mark.parametrize("verbose", [[], ["-v"], ["-vv"]], ids=["quiet", "-v", "-vv"])
def test_no_password_in_any_error(tmp_path: Path, text: str, verbose: list[str]):
    write(tmp_path / "mq.yaml", text)
    result = mq(*verbose, "stats")
    assert result.exit_code in (2, 3), result.output
    assert result.stderr.strip()
    assert "s3cret" not in result.stdout
    assert "s3cret" not in result.stderr
    if not verbose:
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) <= 2
