"""Shared plumbing for the bench: processes with peak RSS, the two databases, small stats.

Everything mq-side is driven through its real CLI (``bench/.venv/bin/mq``) in
subprocesses, so what is measured is what a crontab line runs. Figures are
work / wall time of the processes doing the work, from the launch of the first
to the exit of the last, interpreter start included (for mq and the floor alike).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
JOBS_DIR = BENCH_DIR / "jobs"  # handler/job modules for mq, RQ and huey
BIN = Path(sys.executable).parent  # bench/.venv/bin when started by bench/run
PY = str(BIN / "python")
MQ = str(BIN / "mq")
TIME = shutil.which("time", path="/usr/bin:/bin")  # GNU time, for peak RSS
TABLE = "mq_messages"
QUEUE = "bench"
PAYLOAD_SIZE = 200  # bytes per message, as in FIELD-NOTES
CODE: Path | None = None  # where the mq_cli to measure is (see use_code); None = as installed


def _compile(package: Path) -> None:
    """Byte-compile the code measured, as pip does when it installs a package.

    Otherwise, under PYTHONDONTWRITEBYTECODE (set on some machines, this one
    included), every mq process would compile all its modules from source at
    each start while its baselines load click's compiled files: ~20 ms
    charged to mq that no installed mq pays.
    """
    import compileall

    compileall.compile_dir(str(package), quiet=1)


def use_code(how: str, workdir: Path) -> tuple[str, str]:
    """Measure a snapshot of mq_cli, not files other people edit while the bench runs.

    ``worktree``: a copy of mq_cli/ as it is now; ``live``: the working tree as it is
    at each moment; anything else: that git revision (`git archive`, read-only).
    It goes first on every process's PYTHONPATH, ahead of the copy that bench/run
    installed (a regular install, as users have: an editable one costs every
    interpreter start ~8 ms for its import finder). Returns (what, fingerprint).
    """
    global CODE
    if how == "live":
        CODE = ROOT
        sys.path.insert(0, str(ROOT))
        _compile(ROOT / "mq_cli")
        _compile(JOBS_DIR)
        return "live working tree", code_fingerprint(ROOT)
    dest = workdir / "code"
    dest.mkdir(parents=True)
    if how == "worktree":
        shutil.copytree(
            ROOT / "mq_cli", dest / "mq_cli", ignore=shutil.ignore_patterns("__pycache__")
        )
        what = "snapshot of the working tree at start"
    else:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", how, "mq_cli"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", how],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        what = f"git {how} = {rev}"
    CODE = dest
    _compile(dest / "mq_cli")
    _compile(JOBS_DIR)
    sys.path.insert(0, str(dest))
    for name in [m for m in sys.modules if m == "mq_cli" or m.startswith("mq_cli.")]:
        del sys.modules[name]
    return what, code_fingerprint(dest)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def payload(n: int, size: int = PAYLOAD_SIZE) -> bytes:
    """A JSON object of exactly ``size`` bytes."""
    head = f'{{"n":{n},"pad":"'
    return (head + "x" * (size - len(head) - 2) + '"}').encode()


# -- other people's load ------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")
SERVERS = ("mariadbd", "mysqld", "redis-server", "postgres")
QUIET = {"max_wait": 0.0, "threshold": 0.2}  # set from --wait-quiet
_last_noise: dict[str, float] = {}


def _server_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as fh:
                    if fh.read().strip() in SERVERS:
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_snapshot(servers: list[int]) -> tuple[float, float, float, float, float]:
    """(busy CPU s of this machine, ours, the database servers', stolen by the host, time)."""
    with open("/proc/stat") as fh:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(x) for x in fh.readline().split()[1:9]
        )
    busy = (user + nice + system + irq + softirq) / TICK
    mine = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        mine += usage.ru_utime + usage.ru_stime
    servers_cpu = sum(_proc_cpu(p) for p in servers)
    return busy, mine, servers_cpu, steal / TICK, time.monotonic()


def noise(before: tuple[float, ...], after: tuple[float, ...]) -> dict[str, float]:
    """CPU used meanwhile by processes that are neither the bench's nor the servers', in cores."""
    seconds = max(after[4] - before[4], 1e-6)
    busy, mine, servers, steal = (after[i] - before[i] for i in range(4))
    return {
        "others_cores": round(max(busy - mine - servers, 0.0) / seconds, 2),
        "servers_cores": round(max(servers, 0.0) / seconds, 2),  # < 0: a server restarted
        "steal_cores": round(steal / seconds, 2),
    }


def last_noise() -> dict[str, float]:
    """The noise during the last run_group."""
    return dict(_last_noise)


def wait_quiet() -> float:
    """Wait (up to --wait-quiet seconds) until other processes leave the CPUs alone; seconds waited."""
    if QUIET["max_wait"] <= 0:
        return 0.0
    servers = _server_pids()
    started = time.monotonic()
    while time.monotonic() - started < QUIET["max_wait"]:
        before = cpu_snapshot(servers)
        time.sleep(0.3)
        if noise(before, cpu_snapshot(servers))["others_cores"] < QUIET["threshold"]:
            break
    waited = time.monotonic() - started - 0.3
    if waited > 5:
        log(f"  (waited {waited:.0f}s for other processes to leave the CPUs alone)")
    return waited


# -- processes ------------------------------------------------------------


@dataclass
class Proc:
    argv: list[str]
    rc: int = 0
    maxrss_kb: int = 0  # the process itself (wait4), exact
    children_peak_kb: int = 0  # sum over its descendants of their polled peak RSS (VmHWM)
    stdout: str = ""
    stderr: str = ""

    def json(self) -> Any:
        return json.loads(self.stdout.strip().splitlines()[-1])


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every process below ``pid``."""
    found: list[tuple[int, int]] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            found += [(kid, current) for kid in kids]
            todo += kids
    return found


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_group(
    argvs: list[list[str]],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    stdin_path: str | Path | None = None,
    feed: Callable[[Any], None] | None = None,
    keep_stdout: bool = True,
    watch_children: bool = False,
    rss: bool = False,
    quiet: bool = True,
    timeout: float = 1800.0,
) -> tuple[float, list[Proc]]:
    """Start every argv at once; (seconds from the first start to the last exit, results).

    ``feed(pipe)`` writes the (single) process's stdin from a thread.
    ``rss``: measure each process's peak RSS (through GNU time). ``watch_children``
    polls the peak RSS of each process's descendants (mq's drain runs Python
    handlers in a child process).
    """
    tmp = tempfile.mkdtemp(prefix="mqbench-proc-")
    procs: list[tuple[subprocess.Popen[bytes], Proc, Any, Any]] = []
    stop = threading.Event()
    peaks: dict[int, dict[int, int]] = {}
    parents: dict[int, int] = {}
    if quiet:
        wait_quiet()
    servers = _server_pids()
    cpu_before = cpu_snapshot(servers)
    try:
        started = time.perf_counter()
        for i, argv in enumerate(argvs):
            if rss and TIME:
                # GNU time's own RSS is tiny: the ru_maxrss it reports is the program's.
                # (wait4 on a child of this big process would report at least our size:
                # Linux carries the peak over fork and exec.)
                argv = [TIME, "-f", "%M", "-o", os.path.join(tmp, f"{i}.rss"), *argv]
            out = open(os.path.join(tmp, f"{i}.out"), "wb") if keep_stdout else subprocess.DEVNULL
            err = open(os.path.join(tmp, f"{i}.err"), "wb")
            if feed is not None:
                stdin: Any = subprocess.PIPE
            elif stdin_path is not None:
                stdin = open(stdin_path, "rb")
            else:
                stdin = subprocess.DEVNULL
            p = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, env=env, cwd=cwd)
            if stdin_path is not None and feed is None:
                stdin.close()
            procs.append((p, Proc(argv), out, err))
        feeder = None
        if feed is not None:
            pipe = procs[0][0].stdin

            def run_feed() -> None:
                try:
                    feed(pipe)
                except BrokenPipeError:
                    pass
                finally:
                    try:
                        pipe.close()  # type: ignore[union-attr]
                    except BrokenPipeError:
                        pass

            feeder = threading.Thread(target=run_feed, daemon=True)
            feeder.start()
        watcher = None
        if watch_children:

            def watch() -> None:
                while not stop.is_set():
                    for p, _, _, _ in procs:
                        seen = peaks.setdefault(p.pid, {})
                        for kid, parent in _descendants(p.pid):
                            seen[kid] = max(seen.get(kid, 0), _hwm_kb(kid))
                            parents[kid] = parent
                    stop.wait(0.02)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
        deadline = started + timeout
        for p, proc, _, _ in procs:
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    for q, _, _, _ in procs:
                        if q.returncode is None:
                            q.kill()
                    raise TimeoutError(f"{argvs[0][:4]}... took more than {timeout:.0f}s")
                time.sleep(0.002)
            p.returncode = os.waitstatus_to_exitcode(status)
            proc.rc = p.returncode
        wall = time.perf_counter() - started
        _last_noise.clear()
        _last_noise.update(noise(cpu_before, cpu_snapshot(servers)))
        stop.set()
        if watcher is not None:
            watcher.join()
        if feeder is not None:
            feeder.join(timeout=5)
        for i, (p, proc, out, err) in enumerate(procs):
            seen = peaks.get(p.pid, {})
            if rss and TIME:
                text = Path(tmp, f"{i}.rss").read_text().split()
                proc.maxrss_kb = int(text[-1]) if text and text[-1].isdigit() else 0
                program = [pid for pid in seen if parents.get(pid) == p.pid]
                seen = {pid: kb for pid, kb in seen.items() if pid not in program}
            proc.children_peak_kb = sum(seen.values())
            if keep_stdout:
                out.close()
                proc.stdout = Path(out.name).read_text(errors="replace")
            err.close()
            proc.stderr = Path(err.name).read_text(errors="replace")[-4000:]
        return wall, [proc for _, proc, _, _ in procs]
    finally:
        stop.set()
        shutil.rmtree(tmp, ignore_errors=True)


def stop(proc: subprocess.Popen[Any], sig: int, patience: float) -> None:
    """Ask a worker to stop with ``sig``; SIGKILL it if it has not exited after ``patience`` s."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_ok(procs: Iterable[Proc], what: str) -> None:
    for proc in procs:
        if proc.rc != 0:
            raise RuntimeError(f"{what}: exit {proc.rc}: {' '.join(proc.argv)}\n{proc.stderr}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- databases ------------------------------------------------------------


def mysql_params(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
        "database": parts.path.lstrip("/") or None,
    }


def mysql_connect(url: str, database: bool = True, **extra: Any) -> Any:
    """A PyMySQL connection set up as mq's (TLS off, READ COMMITTED, autocommit)."""
    import pymysql

    params = mysql_params(url)
    if not database:
        params["database"] = None
    return pymysql.connect(
        **params,
        autocommit=True,
        charset="utf8mb4",
        ssl_disabled=True,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        **extra,
    )


PG_NAME = re.compile(r"^mqbench[a-z0-9_]*$")


def pg_database(url: str) -> str:
    """The bench database of a PostgreSQL URL; only names starting with mqbench (it is dropped)."""
    name = urlsplit(url).path.lstrip("/")
    if not PG_NAME.match(name):
        raise SystemExit(
            f"bench: refusing to drop database {name!r}: use a name starting with mqbench "
            "(lowercase letters, digits, _)"
        )
    return name


def pg_connect(url: str, database: str | None = None) -> Any:
    """A psycopg connection (autocommit, TLS off as on this machine); ``database`` overrides the URL's."""
    import psycopg

    if database is not None:
        parts = urlsplit(url)
        url = parts._replace(path="/" + database).geturl()
    return psycopg.connect(url, autocommit=True, sslmode="disable")


LABELS = {"mysql": "MariaDB", "postgres": "PostgreSQL", "sqlite": "SQLite"}


@dataclass
class Target:
    """One database under test: its URL, an mq config file, and bulk helpers."""

    kind: str  # "mysql", "postgres" or "sqlite"
    url: str
    workdir: Path
    config: Path = field(init=False)
    group_config: Path = field(init=False)  # the same with group_ack: true
    path: str | None = None  # the SQLite file

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "mq.yaml"
        self.group_config = self.workdir / "mq-group-ack.yaml"
        locks = self.workdir / "locks"
        for path, extra in ((self.config, ""), (self.group_config, "    group_ack: true\n")):
            path.write_text(
                f"database: {self.url}\n"
                f"table: {TABLE}\n"
                f"lock_dir: {locks}\n"
                "queues:\n"
                f"  {QUEUE}:\n"
                "    handler: mqbench_jobs:noop\n"
                "    format: json\n" + extra
            )
        if self.kind == "sqlite":
            self.path = urlsplit(self.url).path[1:]  # sqlite:////abs -> /abs

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def env(self, **extra: str) -> dict[str, str]:
        return mq_env(**extra)

    # -- lifecycle

    def create(self) -> None:
        """A fresh, empty database (MariaDB: drop and recreate the bench database)."""
        if self.kind == "mysql":
            name = mysql_params(self.url)["database"]
            conn = mysql_connect(self.url, database=False)
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cur.execute(f"CREATE DATABASE `{name}`")
            conn.close()
        elif self.kind == "postgres":
            name = pg_database(self.url)  # validated: [a-z0-9_], starts with mqbench
            with pg_connect(self.url, "postgres") as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
        else:
            assert self.path
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.remove(self.path + suffix)
        self.reset()

    def drop(self) -> None:
        """PostgreSQL: drop the bench database at the end (the shared server keeps nothing)."""
        if self.kind == "postgres":
            name = pg_database(self.url)
            with pg_connect(self.url, "postgres") as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def reset(self) -> None:
        """An empty queue table with mq's schema (dropped and recreated: fresh statistics)."""
        if self.kind == "mysql":
            conn = mysql_connect(self.url)
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{TABLE}`, `{TABLE}_meta`")
            conn.close()
        elif self.kind == "postgres":
            with pg_connect(self.url) as conn:
                conn.execute(f'DROP TABLE IF EXISTS "{TABLE}", "{TABLE}_meta"')
        else:
            conn = self.sqlite()
            conn.execute(f'DROP TABLE IF EXISTS "{TABLE}"')
            conn.execute(f'DROP TABLE IF EXISTS "{TABLE}_meta"')
            conn.execute("VACUUM")
            conn.close()
        self.mq_init()

    def mq_init(self) -> None:
        from mq_cli.api import MQ
        from mq_cli.core.config import load_config

        MQ(load_config(str(self.config))).init()

    def sqlite(self) -> sqlite3.Connection:
        assert self.path
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "mysql":
            conn = mysql_connect(self.url)
            with conn.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), params)
                rows = list(cur.fetchall())
            conn.close()
            return rows
        if self.kind == "postgres":
            with pg_connect(self.url) as conn:
                cur = conn.execute(sql.replace("?", "%s"), params)
                return list(cur.fetchall()) if cur.description else []
        conn = self.sqlite()
        rows = conn.execute(sql, params).fetchall()
        conn.close()
        return rows

    def count(self, where: str = "1=1") -> int:
        return int(self.query(f"SELECT COUNT(*) FROM {TABLE} WHERE {where}")[0][0])  # noqa: S608

    def ids(self) -> list[int]:
        return [int(r[0]) for r in self.query(f"SELECT id FROM {TABLE} ORDER BY id")]  # noqa: S608

    def fill(
        self,
        n: int,
        *,
        status: str = "ready",
        delay_seconds: int = 0,
        priority: int = 0,
        queue: str = QUEUE,
        errors: int = 0,
        keys: str | None = None,
    ) -> float:
        """Bulk-load ``n`` messages server-side (a bulk load, as after an import); seconds.

        A ready message with a delay is stored as mq stores it: 'delayed' (schema 4).
        ``keys``: a prefix; each message gets the unique key prefix + its number.
        """
        started = time.perf_counter()
        pad = "x" * (PAYLOAD_SIZE - 10)
        if status == "ready" and delay_seconds > 0:
            status = "delayed"
        if status == "failed" and not errors:
            errors = 10
        if self.kind == "mysql":
            conn = mysql_connect(self.url)
            with conn.cursor() as cur:
                done = 0
                while done < n:
                    step = min(200_000, n - done)
                    cur.execute(
                        f"INSERT INTO `{TABLE}` (queue, status, priority, available_at, "  # noqa: S608
                        "created_at, error_count, unique_key, payload) "
                        "SELECT %s, %s, %s, TIMESTAMPADD(SECOND, %s, UTC_TIMESTAMP(6)), "
                        "UTC_TIMESTAMP(6), %s, IF(%s IS NULL, NULL, CONCAT(%s, seq + %s)), "
                        "CONCAT('{\"n\":', seq, ',\"pad\":\"', %s, '\"}') "
                        f"FROM seq_1_to_{step}",
                        (queue, status, priority, delay_seconds, errors, keys, keys, done, pad),
                    )
                    done += step
            conn.close()
        elif self.kind == "postgres":
            with pg_connect(self.url) as conn:
                conn.execute(
                    f'INSERT INTO "{TABLE}" (queue, status, priority, available_at, created_at, '  # noqa: S608
                    "error_count, unique_key, payload) "
                    "SELECT %s, %s, %s, now() + make_interval(secs => %s), now(), %s, "
                    "CASE WHEN %s::text IS NULL THEN NULL ELSE %s::text || x END, "
                    "convert_to('{\"n\":' || x || ',\"pad\":\"' || %s || '\"}', 'UTF8') "
                    "FROM generate_series(1, %s) AS x",
                    (queue, status, priority, delay_seconds, errors, keys, keys, pad, n),
                )  # fmt: skip
        else:
            conn = self.sqlite()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "  # noqa: S608
                f'INSERT INTO "{TABLE}" (queue, status, priority, available_at, created_at, '
                "error_count, unique_key, payload) "
                "SELECT ?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), "
                "strftime('%Y-%m-%d %H:%M:%f', 'now'), ?, CASE WHEN ? IS NULL THEN NULL ELSE ? || x END, "
                "CAST('{\"n\":' || x || ',\"pad\":\"' || ? || '\"}' AS BLOB) FROM c",
                (n, queue, status, priority, f"+{delay_seconds} seconds", errors, keys, keys, pad),
            )  # fmt: skip
            conn.execute("COMMIT")
            conn.close()
        return time.perf_counter() - started

    def settle(self) -> None:
        """PostgreSQL: VACUUM (ANALYZE) the queue table, as autovacuum leaves it after a bulk load.

        On PostgreSQL >= 13 a bulk INSERT triggers autovacuum's insert threshold
        (1,000 rows + 20 %), and the analyze threshold (50 + 10 %): within a
        naptime (1 min) of the load a user's table is vacuumed (visibility map
        set) and analyzed. The shared server here runs with autovacuum off, so
        the bench does it itself. MariaDB and SQLite: nothing, as in their earlier
        runs (InnoDB recalculates its statistics on its own after a large change).
        """
        if self.kind == "postgres":
            with pg_connect(self.url) as conn:
                conn.execute(f'VACUUM (ANALYZE) "{TABLE}"')

    def explain(self, limit: int = 100) -> list[str]:
        from mq_cli.backends import open_backend
        from mq_cli.core.config import load_config

        config = load_config(str(self.config))
        backend = open_backend(config.database, config.table)
        try:
            return backend.explain_claim(QUEUE, limit)
        finally:
            backend.close()


def wait_for_servers(targets: list[Target], patience: float = 120.0) -> None:
    """After a failure: wait until MariaDB answers again, and give every target a fresh table."""
    deadline = time.monotonic() + patience
    for t in targets:
        while True:
            try:
                t.reset()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)


def mq_env(**extra: str) -> dict[str, str]:
    """The environment of mq subprocesses: no stray MQ_* settings, the bench handlers importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQ_")}
    env["PYTHONPATH"] = python_path()
    env.update(extra)
    return env


def python_path() -> str:
    """PYTHONPATH for subprocesses: the mq_cli snapshot first, then the bench's job modules."""
    return (
        os.pathsep.join([str(CODE)] if CODE else []) + (os.pathsep if CODE else "") + str(JOBS_DIR)
    )


# -- the machine ----------------------------------------------------------


def fsync_latency(directory: str | Path, rounds: int = 200) -> dict[str, float]:
    """Write 4 KiB + fdatasync, ``rounds`` times: latency in microseconds (FIELD-NOTES trap 7)."""
    path = os.path.join(directory, "fsync-probe")
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    samples = []
    try:
        for _ in range(rounds):
            os.pwrite(fd, block, 0)
            t = time.perf_counter()
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t) * 1e6)
    finally:
        os.close(fd)
        os.remove(path)
    return {
        "median_us": round(median(samples), 1),
        "p90_us": round(pct(samples, 0.9), 1),
        "max_us": round(max(samples), 1),
        "at": time.strftime("%H:%M:%S"),
    }


def code_fingerprint(base: Path = ROOT) -> str:
    """A hash of mq_cli's sources: other people edit them while the bench runs."""
    digest = hashlib.sha256()
    for path in sorted((base / "mq_cli").rglob("*")):
        if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(base)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "mq_cli"],
            capture_output=True,
            text=True,
            check=True,
        )
        changed = len(dirty.stdout.splitlines())
        return out.stdout.strip() + (
            f" (+{changed} uncommitted file(s) in mq_cli)" if changed else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_average() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def machine_info() -> dict[str, Any]:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import platform
    from importlib import metadata

    versions: dict[str, Any] = {}
    for dist in ("PyMySQL", "click", "PyYAML", "rq", "huey", "redis"):
        try:
            versions[dist.lower()] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist.lower()] = None
    versions["sqlite"] = sqlite3.sqlite_version
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_gb, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "versions": {k: str(v) for k, v in versions.items()},
        "load_average": load_average(),
    }


def mariadb_settings(url: str) -> dict[str, Any]:
    conn = mysql_connect(url, database=False)
    names = [
        "version",
        "innodb_flush_log_at_trx_commit",
        "tx_isolation",
        "innodb_buffer_pool_size",
        "innodb_log_file_size",
        "innodb_flush_method",
        "innodb_doublewrite",
        "log_bin",
        "sync_binlog",
        "innodb_autoinc_lock_mode",
        "max_allowed_packet",
    ]
    with conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(f"@@global.{n}" for n in names))
        row = cur.fetchone()
        cur.execute("SELECT @@session.tx_isolation")
        session = cur.fetchone()[0]
    conn.close()
    result = dict(zip(names, [str(v) for v in row], strict=True))
    result["mq_session_isolation"] = session
    return result


def postgres_settings(url: str) -> dict[str, Any]:
    names = ["server_version", "autovacuum", "autovacuum_naptime", "shared_buffers",
             "synchronous_commit", "fsync", "random_page_cost", "effective_cache_size"]  # fmt: skip
    with pg_connect(url, "postgres") as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}


def other_db_clients(url: str) -> int:
    """Other sessions on the server (the test suite may run meanwhile)."""
    conn = mysql_connect(url, database=False)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()"
        )
        n = int(cur.fetchone()[0])
    conn.close()
    return n
