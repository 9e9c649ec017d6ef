"""Security pass: passwords never shown, readable configs warned about, lock
files never followed or borrowed, no shell, no pickle/eval, identifiers checked.

Complements tests/test_config.py, test_errors.py and test_slots.py (which
already cover URL/mapping passwords in config errors, symlinked lock dirs and
files, and another user's lock dir) with the gaps: real processes at every
verbosity including a drain that loses its connection, `mq check`, the
worker's command line, group-readable files, foreign and FIFO lock files, and
the end-to-end drain refusing them without claiming anything."""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

import mq_cli
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ConfigError
from mq_cli.core.identity import database_id
from mq_cli.host.slots import acquire, ensure_lock_dir
from tests.faults.harness import wait_for
from tests.faults.history import read
from tests.proxy import Proxy

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "mq_cli").rglob("*.py"))


def run(db, *args: str, env: dict | None = None, input: bytes | None = None, timeout: float = 60):
    """A real `python -m mq_cli` process to the end; (code, stdout + stderr as text)."""
    proc = db.spawn(*args, env=env or db.env(), stdin=subprocess.PIPE)
    out, err = proc.communicate(input=input, timeout=timeout)
    return proc.returncode, out.decode(errors="replace") + err.decode(errors="replace")


# -- passwords ------------------------------------------------------------------------------


@pytest.fixture
def secret_user(fault_mysql):
    """A MariaDB user whose password has URL-special characters."""
    db = fault_mysql
    database = parse_database_url(db.url).database
    user = "mqs_" + uuid.uuid4().hex[:8]
    password = f"Zq9:s3cr#t@{uuid.uuid4().hex[:6]}%"
    db.sql("CREATE USER %s@%s IDENTIFIED BY %s", (user, "%", password))
    try:
        db.sql(f"GRANT ALL ON `{database}`.* TO %s@%s", (user, "%"))
        yield db, user, password
    finally:
        db.sql("DROP USER IF EXISTS %s@%s", (user, "%"))


def command_lines_of_children(pid: int) -> str:
    """The command lines (as `ps` shows them) of the children of ``pid`` (the drain's
    own holds what it was given: -d URL on a command line is the caller's choice)."""
    lines = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                lines.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" "))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return b"\n".join(lines).decode(errors="replace")


def leaks(text: str, password: str) -> list[str]:
    """Any form of the password found in ``text`` (raw, URL-encoded, or a long part of it)."""
    forms = {password, quote(password, safe=""), password[:8], password[-8:]}
    return [f for f in forms if f in text]


def test_no_password_in_any_output_or_log(secret_user, tmp_path):
    db, user, password = secret_user
    s = parse_database_url(db.url)
    config = tmp_path / "secret.yaml"
    config.write_text(
        f"database:\n  host: {s.host}\n  port: {s.port}\n  user: {user}\n"
        f"  database: {s.database}\n  password: '{password}'\n"
        f"lock_dir: {tmp_path / 'locks'}\n"
        "defaults: {retry_delay: 0, stalled_after: 2s}\n"
        "queues:\n"
        "  ok: {handler: 'tests.faults.jobs:slow'}\n"
        "  bad: {handler: 'tests.faults.jobs:poison', max_errors: 2}\n"
    )
    config.chmod(0o600)
    history = tmp_path / "history.jsonl"
    env = db.env(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(history))
    env.pop("MQ_DATABASE_URL")
    outputs: dict[str, str] = {}
    for verbose in ([], ["-v"], ["-vv"]):
        v = " ".join(verbose)
        for args in (
            ["init"],
            ["enqueue", "-q", "ok", '{"k": "a"}'],
            ["enqueue", "-q", "bad", '{"k": "b"}'],
            ["enqueue", "-q", "ok", "not json"],  # rejected input
            ["stats"],
            ["stats", "--json"],
            ["check"],
            ["drain", "--json"],  # one success, one handler failure (logged)
            ["drain", "-q", "nope"],  # a configuration error
            ["gc", "--stalled"],
            ["gc", "--errors", "--json"],
        ):
            code, text = run(db, *verbose, *args, env=env)
            outputs[f"{v} {' '.join(args)} -> {code}"] = text
        # the same user with the wrong password: access denied
        wrong = dict(
            env,
            MQ_DATABASE_URL=f"mysql://{user}:{quote(password[::-1], safe='')}@{s.host}:{s.port}/{s.database}",
        )
        outputs[f"{v} wrong password"] = run(db, *verbose, "stats", env=wrong)[1]
        # the password in a URL (percent-encoded, as URLs need) to an unreachable port
        url = f"mysql://{user}:{quote(password, safe='')}@127.0.0.1:1/{s.database}"
        outputs[f"{v} unreachable url"] = run(db, *verbose, "-d", url, "check")[1]

    # A drain that loses its connection mid-run, at -vv, through a proxy that goes down.
    proxy = Proxy((s.host, s.port))
    try:
        url = f"mysql://{user}:{quote(password, safe='')}@127.0.0.1:{proxy.port}/{s.database}"
        assert run(db, "enqueue", "-q", "ok", '{"k": "c", "sleep": 1.5}', env=env)[0] == 0
        drain = db.spawn("-vv", "-d", url, "drain", "-q", "ok", env=env)
        wait_for(lambda: read(history) and read(history)[-1]["msg"] == "c", 20, every=0.05)
        # the worker's command line (what `ps` shows) holds no password either
        cmdlines = command_lines_of_children(drain.pid)
        assert "mq_cli.runners.child" in cmdlines
        proxy.down()
        out, err = drain.communicate(timeout=60)
        lost = out.decode(errors="replace") + err.decode(errors="replace")
    finally:
        proxy.close()
    assert drain.returncode == 3, lost
    assert "Traceback" in lost and "lost the connection" in lost  # -vv: the full story
    outputs["-vv drain losing its connection"] = lost
    outputs["worker command lines"] = cmdlines

    found = {name: leaks(text, password) for name, text in outputs.items()}
    assert {name: forms for name, forms in found.items() if forms} == {}
    assert "access denied" in outputs[" wrong password"]
    assert "cannot connect" in outputs["-vv unreachable url"]


def test_no_password_from_a_url_with_an_unencoded_slash():
    password = "2024/Secret-Pw"
    from click.testing import CliRunner

    from mq_cli.cli.main import cli

    result = CliRunner().invoke(cli, ["-d", f"mysql://mq:{password}@127.0.0.1:1/app", "stats"])
    assert result.exit_code in (2, 3)
    assert "Secret-Pw" not in result.output


# -- a config holding a password, readable by others -------------------------------------


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_group_or_world_readable_config_with_password_warns_in_a_real_drain(
    sqlite_db, tmp_path, mode
):
    db = sqlite_db
    config = tmp_path / "readable.yaml"
    config.write_text(
        f"database: mysql://mq:s3cret-pw@127.0.0.1:1/app\nlock_dir: {tmp_path / 'locks'}\n"
        "queues:\n  q: {handler: 'tests.faults.jobs:slow'}\n"
    )
    config.chmod(mode)
    env = db.env(MQ_CONFIG=str(config))
    env.pop("MQ_DATABASE_URL")
    # --max-seconds: the drain's patience for a database that is away (30 s) is
    # not what this test is about; a drain that ends while it is away exits 3.
    code, text = run(db, "drain", "-q", "q", "--max-seconds", "1", env=env)
    assert code == 3  # nothing listens on port 1
    assert "readable by other users" in text and f"chmod 600 {config}" in text
    assert "s3cret-pw" not in text
    config.chmod(0o600)
    code, text = run(db, "drain", "-q", "q", "--max-seconds", "1", env=env)
    assert code == 3 and "readable" not in text


def test_password_env_in_a_readable_config_is_not_a_secret_there(sqlite_db, tmp_path):
    db = sqlite_db
    config = tmp_path / "env.yaml"
    config.write_text(
        "database:\n  host: 127.0.0.1\n  port: 1\n  database: x\n  password_env: MQ_PW\n"
    )
    config.chmod(0o644)
    env = db.env(MQ_CONFIG=str(config), MQ_PW="s3cret-pw")
    env.pop("MQ_DATABASE_URL")
    code, text = run(db, "stats", env=env)
    assert code == 3
    assert "readable" not in text and "s3cret-pw" not in text


# -- lock files ----------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_lock_file_owned_by_another_user_is_refused_and_left_alone(tmp_path):
    locks = tmp_path / "locks"
    ensure_lock_dir(str(locks))
    theirs = locks / "q.0.lock"
    theirs.write_text("4242\n")
    os.chown(theirs, 12345, 12345)
    with pytest.raises(ConfigError, match="not a regular file owned by this user"):
        acquire(str(locks), "q", 1)
    assert theirs.read_text() == "4242\n"  # not truncated, not rewritten


def test_a_fifo_lock_file_is_refused_without_hanging(tmp_path):
    locks = tmp_path / "locks"
    ensure_lock_dir(str(locks))
    os.mkfifo(locks / "q.0.lock", 0o600)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file"):
        acquire(str(locks), "q", 1)
    assert time.monotonic() - started < 5


def _drain_refuses(db, tmp_path, lock_dir: Path, expected: str) -> None:
    config = tmp_path / "locks.yaml"
    config.write_text(
        f"lock_dir: {lock_dir}\nqueues:\n  q: {{handler: 'tests.faults.jobs:slow'}}\n"
    )
    env = db.env(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(tmp_path / "h.jsonl"))
    assert run(db, "enqueue", "-q", "q", '{"k": "x"}', env=env)[0] == 0
    code, text = run(db, "drain", "-q", "q", env=env)
    assert code == 2, text
    assert re.search(expected, text), text
    assert "Traceback" not in text and len(text.strip().splitlines()) <= 2
    # refused before anything was claimed
    assert db.sql("SELECT status, error_count FROM mq_messages") == [("ready", 0)]
    assert read(tmp_path / "h.jsonl") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_drain_refuses_a_lock_dir_of_another_user_before_claiming(db, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 12345, 12345)
    _drain_refuses(db, tmp_path, theirs, "belongs to uid 12345")


def test_drain_refuses_a_symlinked_lock_file_before_claiming(db, tmp_path):
    locks = tmp_path / "locks"
    # The slot files are in the database's own directory of the lock_dir (host/slots.py).
    mine = locks / ("db-" + database_id(parse_database_url(db.url), "mq_messages"))
    ensure_lock_dir(str(mine))
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (mine / "q.0.lock").symlink_to(victim)
    _drain_refuses(db, tmp_path, locks, "symlink")
    assert victim.read_text() == "precious"


# -- exec handlers: never a shell ------------------------------------------------------------------

NASTY = [
    b"$(touch {dir}/pwned1)",
    b"`touch {dir}/pwned2`",
    b"; touch {dir}/pwned3 #",
    b"| touch {dir}/pwned4",
    b"&& touch {dir}/pwned5\n'\"\\*?[a]{{b,c}}~",
    b"\x00\xff binary \x00",
]


def test_exec_handlers_get_the_payload_on_stdin_and_never_see_a_shell(db, tmp_path):
    handler = (
        f"exec:{sys.executable} -m tests.faults.jobs capture "
        f"'$(touch {tmp_path}/pwned0)' \"a b\" * ~ '$HOME' ';' '|' \"`id`\""
    )
    config = tmp_path / "exec.yaml"
    config.write_text(
        json.dumps(
            {
                "lock_dir": str(tmp_path / "locks"),
                "queues": {"x": {"handler": handler, "format": "bytes"}},
            }
        )
    )
    env = db.env(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(tmp_path / "h.jsonl"))
    payloads = [p.replace(b"{dir}", str(tmp_path).encode()) for p in NASTY]
    ids = []
    for payload in payloads:
        code, text = run(db, "enqueue", "-q", "x", env=env, input=payload)
        assert code == 0, text
        ids.append(int(text.split()[0]))
    code, text = run(db, "drain", "-q", "x", env=env)
    assert code == 0, text
    records = {r["id"]: r for r in read(tmp_path / "h.jsonl")}
    assert sorted(records) == sorted(ids)
    for i, payload in zip(ids, payloads, strict=True):
        assert base64.b64decode(records[i]["stdin"]) == payload  # byte for byte
        # split like a shell would, but nothing expanded, substituted or globbed
        assert records[i]["argv"] == [
            f"$(touch {tmp_path}/pwned0)",
            "a b",
            "*",
            "~",
            "$HOME",
            ";",
            "|",
            "`id`",
        ]
    assert sorted(p.name for p in tmp_path.glob("pwned*")) == []


# -- no pickle, eval or shell anywhere in mq_cli ---------------------------------------------------

FORBIDDEN = {
    "pickle": r"\bc?pickle\b",
    "marshal": r"\bmarshal\b",
    "shelve": r"\bshelve\b",
    "eval(": r"(?<![\w.])eval\s*\(",
    "exec(": r"(?<![\w.])exec\s*\(",
    "compile(": r"(?<![\w.])compile\s*\(",
    "__import__": r"__import__",
    "shell=True": r"shell\s*=\s*True",
    "os.system": r"\bos\.system\b",
    "os.popen": r"\bos\.popen\b",
    "yaml.load(": r"\byaml\.(load|load_all|unsafe_load|full_load)\s*\(",
    "yaml Loader": r"\b(Unsafe|Full)?Loader\b(?<!SafeLoader)",
}


def test_sources_hold_no_pickle_eval_or_shell():
    assert len(SOURCES) > 10
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, pattern in FORBIDDEN.items():
                if re.search(pattern, line) and not re.search(r"SafeLoader|SafeConstructor", line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {name}: {line.strip()}")
    assert found == []


def test_sources_call_no_eval_and_start_no_shell_ast():
    """The same, by the syntax tree: catches what a grep would miss (aliases, keywords)."""
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if {"pickle", "cPickle", "marshal", "shelve", "dill"} & {
                    m.split(".")[0] for m in modules
                }:
                    found.append(f"{path.name}:{node.lineno}: imports {modules}")
            if isinstance(node, ast.Call):
                func = node.func
                name = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else ""
                )
                if isinstance(func, ast.Name) and name in ("eval", "exec", "compile", "__import__"):
                    found.append(f"{path.name}:{node.lineno}: calls {name}()")
                for keyword in node.keywords:
                    if keyword.arg == "shell" and not (
                        isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                    ):
                        found.append(f"{path.name}:{node.lineno}: {name}(shell=...)")
                if name in ("system", "popen") and isinstance(func, ast.Attribute):
                    found.append(f"{path.name}:{node.lineno}: calls os.{name}()")
    assert found == []


# -- identifiers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "queue",
    ["a'; DROP TABLE mq_messages; --", "a`b", 'a"b', "a b", "../../etc/passwd", "a\nb", "é"],
)
def test_hostile_queue_names_are_refused_before_any_sql(db, queue):
    for args in (["enqueue", "-q", queue, "{}"], ["stats", "-q", queue], ["drain", "-q", queue]):
        result = db.run(*args)
        assert result.exit_code == 2, result.output
        assert "invalid queue name" in result.stderr
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


@pytest.mark.parametrize(
    "table", ['x"; DROP TABLE mq_messages; --', "x`", "mq messages", "1abc", "x" * 58, "tab\n"]
)
def test_hostile_table_names_are_refused_before_any_sql(tmp_path, table):
    conn = sqlite3.connect(tmp_path / "app.db")
    conn.execute("CREATE TABLE mq_messages (x)")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with pytest.raises(ConfigError, match="invalid table name"):
        mq_cli.enqueue("q", {}, connection=conn, table=table)
    assert statements == []
    config = tmp_path / "t.yaml"
    config.write_text(json.dumps({"table": table}))
    with pytest.raises(ConfigError, match="table"):
        mq_cli.connect(config=str(config), database=f"sqlite:///{tmp_path}/mq.db")
    conn.close()


def test_unique_keys_and_payloads_are_parameters_not_sql(db):
    key = "k'); DELETE FROM mq_messages; --"
    payload = '"\'); DROP TABLE mq_messages; --"'
    for _ in range(2):
        result = db.run("enqueue", "-q", "q", "--unique-key", key, payload)
        assert result.exit_code == 0, result.output
    rows = db.sql("SELECT unique_key, payload FROM mq_messages")
    assert len(rows) == 1
    stored_key, stored_payload = rows[0]
    assert (stored_key.decode() if isinstance(stored_key, bytes) else stored_key) == key
    assert bytes(stored_payload).decode() == payload


# -- credentials never reach handlers or output ------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://user:Zq9secret@host/x.db",  # no third slash: not a path
        "sqlite://user:Zq9secret@",
        "oracle://user:Zq9secret@host/db",  # a scheme mq does not support
        "mysql://user:Zq9secret@host:99999/db",
        "mysql://user:Zq9secret@host/",
        "user:Zq9secret@host/db",
    ],
)
def test_a_bad_url_never_shows_its_password(url, tmp_path):
    from click.testing import CliRunner

    from mq_cli.cli.main import cli

    for args in (["-d", url, "stats"], ["stats"], ["-v", "-d", url, "check"]):
        result = CliRunner().invoke(cli, args, env={"MQ_DATABASE_URL": url, "MQ_CONFIG": None})
        assert result.exit_code in (1, 2), (args, result.output)
        assert "Zq9secret" not in result.output, (args, result.output)
        assert "***" in result.output, (args, result.output)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:Zq9secret@nosuchhost.invalid/db",
        "mysql://user:Zq9secret@nosuchhost.invalid/db",
    ],
)
def test_an_unreachable_database_never_shows_its_password(url):
    from click.testing import CliRunner

    from mq_cli.cli.main import cli

    for args in (["-d", url, "stats"], ["-v", "-d", url, "check"]):
        result = CliRunner().invoke(cli, args, env={"MQ_DATABASE_URL": url, "MQ_CONFIG": None})
        assert result.exit_code in (1, 3), (args, result.output)
        assert "Zq9secret" not in result.output, (args, result.output)
        assert "nosuchhost.invalid" in result.output, (args, result.output)


@pytest.mark.parametrize("kind", ["exec", "python"])
def test_handlers_do_not_inherit_database_credentials(db, tmp_path, kind):
    """MQ_DATABASE_URL and the config's password_env variable stay with mq: a handler
    that shows its environment must not put them into last_error."""
    (tmp_path / "envdump.py").write_text(
        "import os, sys\n"
        "def dump(payload):\n"
        "    raise RuntimeError(sorted(f'{k}={v}' for k, v in os.environ.items() if 'MQ_' in k))\n"
        "if __name__ == '__main__':\n"
        "    dump(None)\n"
    )
    handler = (
        f"exec:{sys.executable} {tmp_path / 'envdump.py'}" if kind == "exec" else "envdump:dump"
    )
    config = tmp_path / "mq.yaml"
    config.write_text(
        "database: {host: db.invalid, database: app, password_env: MQ_TEST_SECRET_PW}\n"
        f"lock_dir: {tmp_path / 'locks'}\n"
        f"queues:\n  q: {{handler: '{handler}', max_errors: 1}}\n"
    )
    # MQ_DATABASE_URL wins over the config's database; password_env stays a secret.
    env = db.env(MQ_CONFIG=str(config), MQ_TEST_SECRET_PW="Pw-z8q1", MQ_TEST_VISIBLE="seen")
    del env["MQ_TEST_DATABASE_URL"]  # the tests' own copy (tests/jobs.py): not mq's to hide
    assert run(db, "enqueue", "-q", "q", "{}", env=env)[0] == 0
    code, text = run(db, "drain", "-q", "q", env=env)
    assert code == 0, text
    (error,) = db.sql("SELECT last_error FROM mq_messages")[0]
    assert "MQ_TEST_VISIBLE=seen" in error  # the handler did show its environment
    assert "MQ_TEST_SECRET_PW" not in error and "Pw-z8q1" not in error
    assert "MQ_DATABASE_URL" not in error and db.url not in error


def test_the_password_env_variable_of_a_used_mapping_is_hidden_too(fault_mysql, tmp_path):
    db = fault_mysql
    s = parse_database_url(db.url)
    config = tmp_path / "mq.yaml"
    config.write_text(
        f"database: {{host: {s.host}, port: {s.port}, user: {s.user or 'root'}, "
        f"database: {s.database}, password_env: MQ_TEST_SECRET_PW}}\n"
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n  q: {handler: \"exec:sh -c 'env >&2; exit 1'\", max_errors: 1}\n"
    )
    env = db.env(MQ_CONFIG=str(config), MQ_TEST_SECRET_PW=s.password or "")
    env.pop("MQ_DATABASE_URL")
    assert run(db, "enqueue", "-q", "q", "{}", env=env)[0] == 0
    code, text = run(db, "drain", "-q", "q", env=env)
    assert code == 0, text
    (error,) = db.sql("SELECT last_error FROM mq_messages")[0]
    assert "PATH=" in error and "MQ_TEST_SECRET_PW" not in error


# -- the current directory of a drain ---------------------------------------------------------


def test_a_drain_in_a_writable_directory_runs_no_planted_module(db, tmp_path):
    """`json.py` (and friends) planted where a drain runs must not shadow the standard
    library in mq or its worker; a handler module there still imports."""
    marker = tmp_path / "planted-ran"
    for name in ("json", "struct", "select", "inspect", "traceback"):
        (tmp_path / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n"
        )
    out = tmp_path / "ran"
    (tmp_path / "cwdjob.py").write_text(
        f"def handle(payload):\n    open({str(out)!r}, 'a').write('ran\\n')\n"
    )
    assert db.run("enqueue", "-q", "q", "{}").exit_code == 0
    mq = Path(sys.executable).with_name("mq")  # the console script, as cron runs it
    assert mq.exists(), mq
    env = db.env()
    env.pop("PYTHONPATH")  # the installed mq, as in production
    for args in (["check"], ["drain", "-q", "q", "--handler", "cwdjob:handle"]):
        proc = subprocess.run(
            [str(mq), *args], cwd=tmp_path, env=env, capture_output=True, timeout=60
        )
        assert proc.returncode in (0, 1), proc.stderr
    assert not marker.exists(), marker.read_text()
    assert out.read_text() == "ran\n"
