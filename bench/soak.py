"""Sustained load: producers at a steady rate and cron-style drains, for --minutes (issue 21 item 3).

    bench/run soak [--quick] [--minutes N] [--backends sqlite,mysql,postgres] [--serial]

On each backend, a producer process enqueues --rate messages a second through mq's
Python API (one message per call, as an application does): most ready at once,
some delayed by 5-120 s, some whose handler fails twice before it succeeds
(retries waiting out their backoff), a few that always fail (they become
`failed`), some with a unique key (tombstones kept `unique_retention`). Drains
run the way cron runs them (the queue's default batch_size, 10, and concurrency,
1): `mq drain -q soak --max-seconds 4 --json` launched
every 5 s whatever the last one does (a drain that finds its slot busy exits at
once), and `mq gc --errors --delete -q soak` every minute, as a crontab line
that clears failed messages would. Retentions are scaled down so the soak
reaches its steady state within the run: run_log_retention 3m (mq's default 7d)
and unique_retention 2m.

Sampled every minute (every 30 s with --quick):
- claim latency p50/p99: wall time of each `Backend.claim` inside the cron
  drains themselves (bench/soak_hook/sitecustomize.py wraps SqlBackend.claim in
  those processes: the claim statement and the promotion of due delayed rows);
- enqueue-to-start latency p50/p99: the handler's start minus when the message was
  due (enqueue time + delay), first tries only (bench/jobs/mqbench_soak.py);
- the queue table's size (heap/file) and its indexes', rows by status, dead row
  versions (PostgreSQL n_dead_tup, autovacuum runs; MariaDB's purge backlog,
  the history list length), the run log's tables (rows and bytes).

Backends run side by side by default (one 10-minute window for all three in
quick mode); --serial runs them one after another. PostgreSQL: the shared server
(--pg-url) is used when its autovacuum is on; when it is off (`SHOW autovacuum`),
a private postmaster is started (initdb as the postgres user into /tmp, its own
port, Debian's defaults otherwise: autovacuum on) and stopped by its pid at the
end. MariaDB: the database mqbench_soak on --mysql-url (dropped afterwards).
JSON goes to bench/results/soak-<stamp>.json, the plot to bench/results/soak.png,
copied to bench/soak.png (bench/soak-quick.png with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common
from common import (
    BENCH_DIR,
    LABELS,
    MQ,
    PY,
    log,
    mysql_connect,
    pg_connect,
    python_path,
    use_code,
)

RESULTS = BENCH_DIR / "results"
HOOK = BENCH_DIR / "soak_hook"
TABLE = "mq_messages"
QUEUE = "soak"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
MYSQL_DB = "mqbench_soak"
PG_DB = "mqbench_soak"
DRAIN_EVERY = 5.0  # seconds between cron-style drain launches
DRAIN_MAX_SECONDS = 4  # each drain starts no message after this (cron: every minute, 55 s)
PAD = "x" * 150
SEEDS = {"sqlite": 1, "mysql": 2, "postgres": 3}


# -- the producer (a process of its own: `soak.py produce CONFIG ...`) -------------------------


def produce(config: str, rate: float, seconds: float, seed: int, out: str) -> None:
    """Enqueue ``rate`` messages a second for ``seconds``, one call each; a JSON report to ``out``."""
    import mq_cli

    rng = random.Random(seed)
    counts = {"enqueued": 0, "delayed": 0, "retried": 0, "failing": 0, "keyed": 0,
              "skipped": 0, "errors": 0, "late_max": 0.0}  # fmt: skip
    started = time.time()
    n = 0
    with mq_cli.connect(config=config) as mq:
        while True:
            due = started + n / rate
            now = time.time()
            if due - started >= seconds:
                break
            if due > now:
                time.sleep(due - now)
            else:
                counts["late_max"] = max(counts["late_max"], now - due)
            roll = rng.random()
            delay = rng.uniform(5, 120) if roll < 0.15 else 0.0
            fails = 2 if 0.15 <= roll < 0.20 else (-1 if 0.20 <= roll < 0.21 else 0)
            key = f"k{seed}-{n}" if rng.random() < 0.20 else None
            body = {"t": time.time(), "d": delay, "f": fails, "pad": PAD}
            try:
                got = mq.enqueue(
                    QUEUE, body, delay=delay, priority=rng.randint(0, 2), unique_key=key
                )
            except Exception as exc:  # a busy SQLite, a restarted server: count it, go on
                counts["errors"] += 1
                counts["last_error"] = f"{type(exc).__name__}: {exc}"[:300]
                time.sleep(0.2)
            else:
                if got is None:
                    counts["skipped"] += 1
                else:
                    counts["enqueued"] += 1
                    counts["delayed"] += delay > 0
                    counts["retried"] += fails > 0
                    counts["failing"] += fails < 0
                    counts["keyed"] += key is not None
            n += 1
    counts["seconds"] = time.time() - started
    Path(out).write_text(json.dumps(counts))


# -- a private PostgreSQL, when the shared one runs without autovacuum ----------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """initdb + postgres as the postgres user, own datadir under /tmp, own port; stopped by pid."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="mqsoak-pg-"))
        self.port = free_port()
        shutil.chown(self.base, "postgres", "postgres")
        subprocess.run(
            [str(PG_BIN / "initdb"), "-D", str(self.base / "data"), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--locale=C"],
            check=True, capture_output=True, timeout=180, user="postgres",
        )  # fmt: skip
        self.logfile = open(self.base / "postgres.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(PG_BIN / "postgres"), "-D", str(self.base / "data"), "-p", str(self.port),
             "-k", str(self.base), "-c", "listen_addresses=127.0.0.1",
             "-c", "log_autovacuum_min_duration=0"],
            stdout=self.logfile, stderr=self.logfile, start_new_session=True, user="postgres",
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                pg_connect(self.url("postgres")).close()
                break
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.3)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown of this postmaster only
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logfile.close()
        shutil.rmtree(self.base, ignore_errors=True)


# -- one backend under load ------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Tail:
    """New lines of a log file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[list[float]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        cut = data.rfind(b"\n") + 1  # a line being written stays for the next read
        self.offset += cut
        return [[float(x) for x in line.split()] for line in data[:cut].splitlines() if line]


class Soak:
    def __init__(self, kind: str, url: str, workdir: Path, args: argparse.Namespace) -> None:
        self.kind, self.url, self.args = kind, url, args
        self.workdir = workdir / kind
        self.workdir.mkdir(parents=True)
        self.config = self.workdir / "mq.yaml"
        self.config.write_text(
            f"database: {url}\ntable: {TABLE}\nlock_dir: {self.workdir / 'locks'}\n"
            f"run_log_retention: {args.run_log_retention}\n"
            f"queues:\n  {QUEUE}:\n    handler: mqbench_soak:handle\n    format: json\n"
            "    max_errors: 4\n    retry_delay: 5s\n"
            f"    retry_delay_max: 40s\n    unique_retention: {args.unique_retention}\n"
        )
        self.claim_log = self.workdir / "claims.log"
        self.start_log = self.workdir / "starts.log"
        self.env = common.mq_env(
            MQSOAK_CLAIM_LOG=str(self.claim_log), MQSOAK_START_LOG=str(self.start_log)
        )
        self.env["PYTHONPATH"] = str(HOOK) + os.pathsep + python_path()
        self.samples: list[dict[str, Any]] = []
        self.claims: list[list[float]] = []
        self.drains = {"launched": 0, "succeeded": 0, "failed": 0, "busy_exits": 0,
                       "errors": 0, "last_error": ""}  # fmt: skip
        self.gc = {"runs": 0, "errors": 0, "last_error": ""}
        self.stop = threading.Event()

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def sqlite_path(self) -> str:
        return self.url.split("sqlite:///", 1)[1]

    def mq(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([MQ, "-c", str(self.config), *argv], env=self.env,
                              cwd=self.workdir, capture_output=True, text=True)  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"mq {' '.join(argv)}: exit {done.returncode}: {done.stderr[-500:]}")
        return done

    # -- the run

    def run(self) -> dict[str, Any]:
        self.mq("init")
        seconds = self.args.minutes * 60
        producer_out = self.workdir / "producer.json"
        producer = subprocess.Popen(
            [PY, __file__, "produce", str(self.config), "--rate", str(self.args.rate),
             "--seconds", str(seconds), "--seed", str(SEEDS[self.kind]),
             "--out", str(producer_out)],
            env=self.env, cwd=self.workdir,
        )  # fmt: skip
        started = time.time()
        threads = [threading.Thread(target=self.cron_drains, daemon=True),
                   threading.Thread(target=self.cron_gc, daemon=True)]  # fmt: skip
        for t in threads:
            t.start()
        claims, starts = Tail(self.claim_log), Tail(self.start_log)
        next_sample = started + self.args.sample
        while time.time() < started + seconds:
            time.sleep(max(0.0, min(next_sample, started + seconds) - time.time()))
            if time.time() >= next_sample - 0.01:
                self.sample(started, claims, starts)
                next_sample += self.args.sample
        producer.wait()
        self.stop.set()
        for t in threads:
            t.join()
        if not self.samples:
            self.sample(started, claims, starts)
        report = json.loads(producer_out.read_text()) if producer_out.exists() else {}
        return {"kind": self.kind, "label": self.label, "rate": self.args.rate,
                "minutes": self.args.minutes, "producer": report, "drains": self.drains,
                "gc": self.gc, "samples": self.samples, "claims": self.claims}  # fmt: skip

    def cron_drains(self) -> None:
        """`mq drain` every DRAIN_EVERY seconds, whatever the previous ones do (as cron)."""
        running: list[subprocess.Popen[str]] = []
        argv = [MQ, "-c", str(self.config), "drain", "-q", QUEUE,
                "--max-seconds", str(DRAIN_MAX_SECONDS), "--json"]  # fmt: skip
        next_launch = time.time()
        while not self.stop.is_set() or running:
            if not self.stop.is_set() and time.time() >= next_launch:
                running.append(subprocess.Popen(
                    argv, env=self.env, cwd=self.workdir, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                ))  # fmt: skip
                self.drains["launched"] += 1
                next_launch += DRAIN_EVERY
            for proc in [p for p in running if p.poll() is not None]:
                running.remove(proc)
                out, err = proc.communicate()
                try:
                    report = json.loads(out)
                    self.drains["succeeded"] += report.get("succeeded", 0)
                    self.drains["failed"] += report.get("failed", 0)
                    self.drains["busy_exits"] += bool(report.get("busy"))
                except ValueError:
                    report = None
                if proc.returncode != 0 or report is None:
                    self.drains["errors"] += 1
                    self.drains["last_error"] = f"exit {proc.returncode}: {err[-300:]}"
            time.sleep(0.1)

    def cron_gc(self) -> None:
        """`mq gc --errors --delete -q soak` every minute: failed messages do not pile up."""
        while not self.stop.wait(60):
            done = self.mq("gc", "--errors", "--delete", "-q", QUEUE, check=False)
            self.gc["runs"] += 1
            if done.returncode != 0:
                self.gc["errors"] += 1
                self.gc["last_error"] = f"exit {done.returncode}: {done.stderr[-300:]}"

    # -- samples

    def sample(self, started: float, claims: Tail, starts: Tail) -> None:
        c = claims.read()
        s = starts.read()
        # every claim, kept for the first/last-minute verdict: (s since start, ms, messages)
        self.claims.extend([round(r[0] - started, 2), round(r[1] * 1000, 3), int(r[2])] for r in c)
        claim_ms = [row[1] * 1000 for row in c]
        full_ms = [row[1] * 1000 for row in c if row[2] > 0]
        waits = [row[1] for row in s]
        row: dict[str, Any] = {
            "t": round(time.time() - started, 1),
            "load": os.getloadavg()[0],
            "claims": len(c),
            "claim_p50_ms": quantile(claim_ms, 0.5),
            "claim_p99_ms": quantile(claim_ms, 0.99),
            "claim_nonempty_p99_ms": quantile(full_ms, 0.99),
            "started": len(s),
            "start_p50_s": quantile(waits, 0.5),
            "start_p99_s": quantile(waits, 0.99),
        }
        try:
            row.update(getattr(self, f"sizes_{self.kind}")())
        except Exception as exc:  # a sample lost is said, the soak goes on
            row["size_error"] = f"{type(exc).__name__}: {exc}"[:300]
        self.samples.append(row)
        log(
            f"  {self.label:10} t={row['t']:6.0f}s claims {row['claims']:4} "
            f"p50 {row['claim_p50_ms'] or 0:6.2f} p99 {row['claim_p99_ms'] or 0:6.2f} ms  "
            f"start p50 {row['start_p50_s'] or 0:5.2f} p99 {row['start_p99_s'] or 0:5.2f} s  "
            f"table {row.get('table_bytes', 0) / 1e6:6.2f} MB idx {row.get('index_bytes', 0) / 1e6:6.2f} MB "
            f"runlog {row.get('runlog_bytes', 0) / 1e6:5.2f} MB dead {row.get('dead_rows', '-')} "
            f"rows {row.get('rows', {})}"
        )

    def _by_status(self, rows: list[tuple[Any, ...]]) -> dict[str, int]:
        return {str(status): int(n) for status, n in rows}

    def sizes_postgres(self) -> dict[str, Any]:
        with pg_connect(self.url) as conn:
            rels = {r[0]: r[1:] for r in conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid), "
                "pg_total_relation_size(c.oid), s.n_live_tup, s.n_dead_tup, "
                "s.autovacuum_count, s.autoanalyze_count, s.vacuum_count "
                "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.relname = ANY(%s)",
                ([TABLE, f"{TABLE}_runs", f"{TABLE}_rollup"],),
            ).fetchall()}  # fmt: skip
            indexes = dict(conn.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE relname = %s", (TABLE,),
            ).fetchall())  # fmt: skip
            status = conn.execute(f'SELECT status, COUNT(*) FROM "{TABLE}" GROUP BY status')  # noqa: S608
            rows = self._by_status(status.fetchall())
            runs = conn.execute(f'SELECT (SELECT COUNT(*) FROM "{TABLE}_runs"), '  # noqa: S608
                                f'(SELECT COUNT(*) FROM "{TABLE}_rollup")').fetchone()  # fmt: skip
        main = rels[TABLE]
        runlog = [rels[n] for n in (f"{TABLE}_runs", f"{TABLE}_rollup") if n in rels]
        return {
            "table_bytes": int(main[0]),
            "index_bytes": int(main[1]),
            "indexes": {k: int(v) for k, v in indexes.items()},
            "live_rows": int(main[3]),
            "dead_rows": int(main[4]),
            "autovacuums": int(main[5]),
            "autoanalyzes": int(main[6]),
            "vacuums": int(main[7]),
            "rows": rows,
            "runlog_bytes": sum(int(r[2]) for r in runlog),
            "runlog_dead_rows": sum(int(r[4]) for r in runlog),
            "runlog_rows": {"runs": int(runs[0]), "rollup": int(runs[1])},
        }

    def sizes_mysql(self) -> dict[str, Any]:
        conn = mysql_connect(self.url)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT NAME, FILE_SIZE FROM information_schema.INNODB_SYS_TABLESPACES "
                    "WHERE NAME IN (%s, %s, %s)",
                    tuple(f"{MYSQL_DB}/{n}" for n in (TABLE, f"{TABLE}_runs", f"{TABLE}_rollup")),
                )
                files = {name.split("/", 1)[1]: int(size) for name, size in cur.fetchall()}
                cur.execute(
                    "SELECT index_name, stat_value * @@innodb_page_size FROM mysql.innodb_index_stats "
                    "WHERE database_name = %s AND table_name = %s AND stat_name = 'size'",
                    (MYSQL_DB, TABLE),
                )
                indexes = {name: int(size) for name, size in cur.fetchall()}
                cur.execute(
                    "SELECT DATA_LENGTH, INDEX_LENGTH, DATA_FREE FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (MYSQL_DB, TABLE),
                )
                data, index, free = cur.fetchone()
                cur.execute(f"SELECT status, COUNT(*) FROM `{TABLE}` GROUP BY status")  # noqa: S608
                rows = self._by_status(cur.fetchall())
                cur.execute(f"SELECT (SELECT COUNT(*) FROM `{TABLE}_runs`), "  # noqa: S608
                            f"(SELECT COUNT(*) FROM `{TABLE}_rollup`)")  # fmt: skip
                runs = cur.fetchone()
                cur.execute("SELECT count FROM information_schema.INNODB_METRICS "
                            "WHERE name = 'trx_rseg_history_len'")  # fmt: skip
                history = cur.fetchone()
        finally:
            conn.close()
        return {
            # The .ibd file: what the disk holds (it grows, never shrinks by itself);
            # DATA_LENGTH/INDEX_LENGTH are InnoDB's statistics (refreshed on its own).
            "table_bytes": files.get(TABLE, 0),
            "index_bytes": int(index),
            "data_length": int(data),
            "data_free": int(free),
            "indexes": indexes,
            "rows": rows,
            "dead_rows": int(history[0]) if history else None,  # undo history not yet purged
            "runlog_bytes": files.get(f"{TABLE}_runs", 0) + files.get(f"{TABLE}_rollup", 0),
            "runlog_rows": {"runs": int(runs[0]), "rollup": int(runs[1])},
        }

    def sizes_sqlite(self) -> dict[str, Any]:
        import sqlite3

        path = self.sqlite_path()
        conn = sqlite3.connect(path, timeout=60)
        try:
            pages = dict(
                conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
            )
            index_names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (TABLE,)
            )]  # fmt: skip
            runlog_names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE tbl_name IN (?, ?)",
                (f"{TABLE}_runs", f"{TABLE}_rollup"),
            )]  # fmt: skip
            rows = self._by_status(
                conn.execute(f'SELECT status, COUNT(*) FROM "{TABLE}" GROUP BY status').fetchall()  # noqa: S608
            )
            runs = conn.execute(f'SELECT (SELECT COUNT(*) FROM "{TABLE}_runs"), '  # noqa: S608
                                f'(SELECT COUNT(*) FROM "{TABLE}_rollup")').fetchone()  # fmt: skip
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
        finally:
            conn.close()
        wal = Path(path + "-wal")
        return {
            "table_bytes": int(pages.get(TABLE, 0)),
            "index_bytes": sum(int(pages.get(n, 0)) for n in index_names),
            "indexes": {n: int(pages.get(n, 0)) for n in index_names},
            "file_bytes": os.path.getsize(path),
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            "free_bytes": int(free) * int(page),
            "rows": rows,
            "runlog_bytes": sum(int(pages.get(n, 0)) for n in runlog_names),
            "runlog_rows": {"runs": int(runs[0]), "rollup": int(runs[1])},
        }


# -- verdicts, plot, main ----------------------------------------------------------------------------


def levels_off(values: list[float], floor: float) -> tuple[bool, str]:
    """No unbounded growth: the last third's peak within 1.2x the middle third's (+ ``floor``)."""
    values = [v for v in values if v is not None]
    if len(values) < 3:
        return False, "too few samples"
    third = len(values) // 3
    middle = max(values[third : 2 * third] or values[:1])
    last = max(values[2 * third :])
    ok = last <= middle * 1.2 + floor
    return ok, f"middle third peak {middle:,.0f}, last third peak {last:,.0f}"


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 21's targets: claim p99 over the last minute <= 1.5x the first minute's; sizes level off."""
    out = []
    end = result["minutes"] * 60
    first = [ms for t, ms, _ in result["claims"] if t <= 60]
    last = [ms for t, ms, _ in result["claims"] if t > end - 60]
    a, b = quantile(first, 0.99), quantile(last, 0.99)
    if a and b:
        out.append({"target": "claim p99, last minute / first minute", "value": b / a,
                    "ok": b <= 1.5 * a,
                    "detail": f"{b:.2f} vs {a:.2f} ms ({len(last)} and {len(first)} claims; "
                              f"p50 {quantile(last, 0.5):.2f} vs {quantile(first, 0.5):.2f} ms)"})  # fmt: skip
    everything = result["samples"]
    checks = [("table bytes", "table_bytes", 64 << 10), ("index bytes", "index_bytes", 64 << 10),
              ("run-log bytes", "runlog_bytes", 64 << 10)]  # fmt: skip
    if result["kind"] == "postgres":
        checks.append(("dead rows (n_dead_tup)", "dead_rows", 2_000))
    if result["kind"] == "sqlite":
        checks.append(("database file bytes", "file_bytes", 64 << 10))
    for name, key, floor in checks:
        ok, detail = levels_off([s.get(key) for s in everything], floor)
        out.append({"target": f"{name} level off", "ok": ok, "detail": detail})
    return out


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("claim latency (ms), p99 solid, p50 dashed", "claim_p99_ms", "claim_p50_ms", 1),
        ("enqueue-to-start (s), p99 solid, p50 dashed", "start_p99_s", "start_p50_s", 1),
        ("queue table (MB)", "table_bytes", None, 1e-6),
        ("queue table's indexes (MB)", "index_bytes", None, 1e-6),
        ("run log tables (MB)", "runlog_bytes", None, 1e-6),
        ("dead rows: PG n_dead_tup, MariaDB history", "dead_rows", None, 1),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    colors = {"sqlite": "tab:blue", "mysql": "tab:orange", "postgres": "tab:green"}
    for ax, (title, key, dashed, scale) in zip(axes.flat, panels, strict=True):
        for r in results:
            xs = [s["t"] / 60 for s in r["samples"]]
            ys = [s.get(key) * scale if s.get(key) is not None else None for s in r["samples"]]
            ax.plot(xs, ys, marker=".", color=colors[r["kind"]], label=r["label"])
            if dashed:
                ys = [s.get(dashed) if s.get(dashed) is not None else None for s in r["samples"]]
                ax.plot(xs, ys, linestyle="--", color=colors[r["kind"]])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("minutes")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    r0 = results[0]
    fig.suptitle(f"mq soak: {r0['rate']:g} msg/s per backend, cron drains every "
                 f"{DRAIN_EVERY:g} s, {r0['minutes']:g} min")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "produce":
        p = argparse.ArgumentParser(prog="soak.py produce")
        p.add_argument("config")
        p.add_argument("--rate", type=float, required=True)
        p.add_argument("--seconds", type=float, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--out", required=True)
        a = p.parse_args(argv[1:])
        produce(a.config, a.rate, a.seconds, a.seed, a.out)
        return 0
    parser = argparse.ArgumentParser(prog="bench/run soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=None, help="default 60 (--quick: 10)")
    parser.add_argument("--quick", action="store_true", help="10 minutes, a sample every 30 s")
    parser.add_argument("--rate", type=float, default=50.0, help="messages a second per backend")
    parser.add_argument("--backends", default="sqlite,mysql,postgres")
    parser.add_argument("--serial", action="store_true", help="one backend after another")
    parser.add_argument("--run-log-retention", default="3m")
    parser.add_argument("--unique-retention", default="2m")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306",
                        help=f"MariaDB server; the soak uses (drops, recreates) database {MYSQL_DB}")  # fmt: skip
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="used when its autovacuum is on; else a private server")  # fmt: skip
    parser.add_argument("--code", default="worktree", metavar="worktree|live|REV")
    args = parser.parse_args(argv)
    if args.minutes is None:
        args.minutes = 10.0 if args.quick else 60.0
    args.sample = 30.0 if args.quick or args.minutes < 10 else 60.0
    if args.minutes < 3:
        args.sample = 10.0
    kinds = args.backends.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="mqsoak-"))
    code, _ = use_code(args.code, workdir)
    meta: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "argv": ["bench/run", "soak", *argv],
        "code": code,
        "git": common.git_head(),
        "uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "side_by_side": not args.serial,
        "drain_every_s": DRAIN_EVERY,
        "drain_max_seconds": DRAIN_MAX_SECONDS,
        "sample_s": args.sample,
        "run_log_retention": args.run_log_retention,
        "unique_retention": args.unique_retention,
    }
    private: PrivatePostgres | None = None
    soaks: list[Soak] = []
    try:
        for kind in kinds:
            if kind == "sqlite":
                url = f"sqlite:///{workdir / 'soak.db'}"
            elif kind == "mysql":
                url = urlsplit(args.mysql_url)._replace(path="/" + MYSQL_DB).geturl()
                conn = mysql_connect(url, database=False)
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{MYSQL_DB}`")
                    cur.execute(f"CREATE DATABASE `{MYSQL_DB}`")
                conn.close()
            elif kind == "postgres":
                with pg_connect(args.pg_url) as conn:
                    autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
                if autovacuum == "on":
                    admin = args.pg_url
                else:
                    log(f"soak: autovacuum is {autovacuum} on {args.pg_url.rsplit('@', 1)[-1]}; "
                        "starting a private PostgreSQL")  # fmt: skip
                    private = PrivatePostgres()
                    admin = private.url("postgres")
                    meta["postgres_private"] = {"port": private.port, "datadir": str(private.base)}
                with pg_connect(admin) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{PG_DB}"')
                    conn.execute(f'CREATE DATABASE "{PG_DB}"')
                    meta["postgres"] = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in
                                        ("server_version", "autovacuum", "autovacuum_naptime",
                                         "autovacuum_vacuum_cost_limit", "shared_buffers")}  # fmt: skip
                url = admin.rsplit("/", 1)[0] + "/" + PG_DB
            else:
                raise SystemExit(f"soak: unknown backend {kind!r}")
            soaks.append(Soak(kind, url, workdir, args))
        log(f"soak: {', '.join(s.label for s in soaks)}, {args.rate:g} msg/s each, "
            f"{args.minutes:g} min, {'one after another' if args.serial else 'side by side'}")  # fmt: skip
        results: list[dict[str, Any]] = []
        if args.serial:
            for s in soaks:
                results.append(s.run())
        else:
            out: dict[str, dict[str, Any]] = {}
            threads = [threading.Thread(target=lambda s=s: out.__setitem__(s.kind, s.run()))
                       for s in soaks]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results = [out[s.kind] for s in soaks if s.kind in out]
        for r in results:
            r["targets"] = verdicts(r)
    finally:
        meta["uptime_end"] = subprocess.run(
            ["uptime"], capture_output=True, text=True
        ).stdout.strip()
        meta["date_end_utc"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        if "mysql" in kinds:
            try:
                conn = mysql_connect(args.mysql_url, database=False)
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{MYSQL_DB}`")
                conn.close()
            except Exception as exc:
                log(f"soak: could not drop {MYSQL_DB}: {exc}")
        if private is not None:
            private.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"soak-{stamp}.json"
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    png = RESULTS / "soak.png"
    plot(results, png)
    if args.minutes >= 10:
        shutil.copy(png, BENCH_DIR / ("soak-quick.png" if args.minutes < 60 else "soak.png"))
    print(f"# mq soak, {meta['date_utc']} to {meta['date_end_utc']}\n")
    print(f"`{' '.join(meta['argv'])}`; uptime at start: {meta['uptime_start']}; "
          f"at end: {meta['uptime_end']}\n")  # fmt: skip
    print("| backend | target | verdict | detail |\n| --- | --- | --- | --- |")
    for r in results:
        for t in r["targets"]:
            print(f"| {r['label']} | {t['target']} | {'met' if t['ok'] else 'MISSED'} | "
                  f"{t.get('detail', '')} |")  # fmt: skip
    log(f"soak: results in {path}, plot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
