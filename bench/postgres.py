"""PostgreSQL figures: mq against its floor and two PostgreSQL queues, procrastinate and pgqueuer.

    .venv/bin/python bench/postgres.py [--url postgresql://postgres@127.0.0.1:5432/postgres]

Same workload for all: N messages of 199 bytes (MQ_BENCH_MESSAGES, default
5,000), a no-op handler, drained by 1, 2 and 4 worker processes started
together. Drain throughput = N / wall time from the start of the workers until
the last one exits (the queue is then checked empty: the run fails loudly
otherwise), interpreter start included, as a crontab line pays it. Enqueue
throughput = N / wall time of the enqueuing process, 1,000 messages per
statement or call:

- floor: mq's own statements (postgres/postgres.sql) in a bare psycopg loop, each
  worker its own process: the claim of 100, then one `ack_delete` per message
  (as mq acknowledges), or one `ack_delete_many` per batch; enqueue = the
  multi-row `insert`, 1,000 rows per transaction;
- mq: `mq drain -q q --batch-size 100 --concurrency P` started P times;
  `mq enqueue --lines`; mq group_ack: the same with a config whose queue says
  `group_ack: true` (one `DELETE ... IN` per group, as the second floor);
- procrastinate, each P worker processes started together: its defaults,
  `procrastinate worker --one-shot` (one job at a time, finished jobs kept as
  `succeeded`), and its fastest documented configuration, an async task and
  `--concurrency 10 --delete-jobs successful` (docs/howto/concurrency.md:
  sub-workers run async jobs side by side); `Task.batch_defer`;
- pgqueuer (bench/jobs/mqbench_pgqueuer.py) started P times: `PgQueuer.run(mode=drain)`
  with run()'s defaults (batch_size 10), over asyncpg (pgqueuer's README) and over
  a psycopg AsyncConnection (its PsycopgDriver); and its fastest documented
  configuration over asyncpg (docs/guides/performance-tuning.md and
  docs/comparisons/benchmarks.md): batch_size 100 and `durability balanced`
  (the log and statistics tables unlogged; `volatile` would also make the queue
  itself unlogged, lost in a crash: not the guarantee mq gives);
  `Queries.enqueue` with lists.

The peers run from their own venv (--peers-venv, default bench/peers-venv,
created with `pip install procrastinate pgqueuer[asyncpg,psycopg] psycopg[binary]`
when missing):
they never become dependencies of mq. Every measurement gets a fresh database
(mqbench_pg, mqbench_procrastinate, mqbench_pgqueuer; dropped afterwards).
Best of --rounds (2) interleaved rounds. Prints a Markdown table, and under it
the ratios issue 22 sets targets for (RATIOS). bench/bench.py's `postgres`
section runs the same measurements through run_all().
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from report import postgres_heading, postgres_table

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "bench" / "jobs"
sys.path.insert(0, str(ROOT))

from mq_cli.backends.postgres.dialect import queries  # noqa: E402

MESSAGES = int(os.environ.get("MQ_BENCH_MESSAGES", 5_000))
PAYLOAD = b'{"n": 1, "pad": "' + b"x" * 180 + b'"}'
PEERS = ("procrastinate", "pgqueuer[asyncpg,psycopg]", "psycopg[binary]")
FLOOR_EACH = "floor: claim 100 + DELETE each"
FLOOR_BATCH = "floor: claim 100 + one DELETE ... IN per batch"
PROCRASTINATE = "procrastinate, defaults (worker -c 1, jobs kept)"
PROCRASTINATE_FAST = "procrastinate, async task, -c 10, --delete-jobs successful"
PGQUEUER = "pgqueuer, asyncpg driver"  # run()'s defaults: batch_size 10
PGQUEUER_FAST = "pgqueuer, asyncpg driver, batch_size 100, durability balanced"
PGQUEUER_PSYCOPG = "pgqueuer, psycopg driver"
SYSTEMS = (FLOOR_EACH, FLOOR_BATCH, "mq", "mq group_ack", PROCRASTINATE, PROCRASTINATE_FAST,
           PGQUEUER, PGQUEUER_FAST, PGQUEUER_PSYCOPG)  # fmt: skip
# Rows that load with another row's enqueue: their enqueue cell stays empty.
SAME_ENQUEUE = {FLOOR_BATCH: FLOOR_EACH, "mq group_ack": "mq"}
# The ratios printed under the table: (name, numerator row, denominator row).
RATIOS = (("mq / commit-each floor", "mq", FLOOR_EACH),
          ("mq group_ack / one-statement floor", "mq group_ack", FLOOR_BATCH),
          ("mq group_ack / pgqueuer (asyncpg, fastest documented)", "mq group_ack",
           PGQUEUER_FAST))  # fmt: skip
DATABASES = {"procrastinate": "mqbench_procrastinate", "pgqueuer": "mqbench_pgqueuer"}


# -- the floor's own processes (run as `postgres.py floor-drain|floor-insert URL ...`) --------


def floor_drain(url: str, ack: str) -> None:
    """Claims 100 at a time until nothing is left; prints how many it acknowledged."""
    sql = queries("mq_messages")
    done = 0
    with psycopg.connect(url, autocommit=True, sslmode="disable") as conn:
        while True:
            rows = conn.execute(sql["claim"], ("q", 100, "floor")).fetchall()
            # Nothing taken: one row of NULLs (and the count selected), as mq reads it.
            ids = [row[0] for row in rows if row[0] is not None]
            if not ids:
                break
            if ack == "many":
                marks = ", ".join(["%s"] * len(ids))
                conn.execute(sql["ack_delete_many"].replace("{ids}", marks), (*ids, "floor"))
            else:
                for ident in ids:
                    conn.execute(sql["ack_delete"], (ident, "floor"))
            done += len(ids)
    print(done)


def floor_insert(url: str, count: int) -> None:
    sql = queries("mq_messages")
    with psycopg.connect(url, sslmode="disable") as conn:
        for start in range(0, count, 1000):
            rows = min(1000, count - start)
            statement = sql["insert"].replace("{values}", ",".join([sql["insert_row"]] * rows))
            params = [value for _ in range(rows) for value in ("q", "ready", 0, 0.0, None, PAYLOAD)]
            conn.execute(statement, params).fetchall()
            conn.commit()


# -- the bench -----------------------------------------------------------------------------------


class Bench:
    def __init__(self, url: str, peers: Path, count: int, code: Path = ROOT) -> None:
        self.url = url
        self.peers = peers
        self.count = count
        self.code = code  # the mq_cli measured: bench.py passes its snapshot (--code)
        self.tmp = Path(tempfile.mkdtemp(prefix="mqbench-pg-"))

    def target(self, database: str) -> str:
        return self.url.rsplit("/", 1)[0] + "/" + database

    def sql(self, database: str, statement: str) -> int:
        with psycopg.connect(self.target(database), autocommit=True, sslmode="disable") as conn:
            cursor = conn.execute(statement)
            row = cursor.fetchone() if cursor.description else None
            return int(row[0]) if row else 0

    def fresh(self, database: str) -> str:
        with psycopg.connect(self.url, autocommit=True, sslmode="disable") as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {database}")
        return self.target(database)

    def drop(self, database: str) -> None:
        with psycopg.connect(self.url, autocommit=True, sslmode="disable") as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")

    def env(self, url: str, **extra: str) -> dict[str, str]:
        env = dict(os.environ, MQ_DATABASE_URL=url, MQBENCH_PG_URL=url + "?sslmode=disable")
        env.update(extra)
        env["PYTHONPATH"] = f"{self.code}:{JOBS}"
        env["XDG_RUNTIME_DIR"] = str(self.tmp)  # mq's slot locks, away from anyone else's
        for name in ("MQ_CONFIG", "PROCRASTINATE_VERBOSE", "PROCRASTINATE_LOG_LEVEL"):
            env.pop(name, None)
        return env

    def group(
        self,
        argvs: list[list[str]],
        url: str,
        stdin: bytes | None = None,
        extra: dict[str, str] | None = None,
    ) -> tuple[float, list[str]]:
        """Starts every argv at once; the wall time until the last exits, and their stdouts."""
        env = self.env(url, **(extra or {}))
        started = time.perf_counter()
        procs = [
            subprocess.Popen(argv, env=env, cwd=self.tmp, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for argv in argvs
        ]  # fmt: skip
        outputs = [proc.communicate(stdin) for proc in procs]
        wall = time.perf_counter() - started
        for argv, proc, (_out, err) in zip(argvs, procs, outputs, strict=True):
            if proc.returncode:
                raise SystemExit(f"{argv} exited {proc.returncode}:\n{err.decode()[-3000:]}")
        return wall, [out.decode() for out, _err in outputs]

    def check(self, system: str, left: int, done: int) -> None:
        if left or done != self.count:
            raise SystemExit(f"{system}: {done} of {self.count} messages done, {left} left")

    # Each measure: a fresh database, the system's own enqueue of N (timed), ANALYZE (as
    # autovacuum would soon), then P workers drain it (timed). Returns (enqueue, drain) msg/s.

    def floor(self, procs: int, ack: str) -> tuple[float, float]:
        url = self.fresh("mqbench_pg")
        self.group([[sys.executable, "-m", "mq_cli", "init"]], url)
        me = [sys.executable, str(Path(__file__).resolve())]
        took_in, _ = self.group([[*me, "floor-insert", url, str(self.count)]], url)
        self.sql("mqbench_pg", "ANALYZE")
        took, outs = self.group([[*me, "floor-drain", url, ack]] * procs, url)
        left = self.sql("mqbench_pg", "SELECT count(*) FROM mq_messages")
        self.check("floor", left, sum(int(out) for out in outs))
        return self.count / took_in, self.count / took

    def mq(self, procs: int, group_ack: bool = False) -> tuple[float, float]:
        url = self.fresh("mqbench_pg")
        mq = [sys.executable, "-m", "mq_cli"]
        if group_ack:
            config = self.tmp / "mq-group-ack.yaml"
            config.write_text("queues:\n  q:\n    group_ack: true\n")
            mq += ["-c", str(config)]
        self.group([[*mq, "init"]], url)
        lines = PAYLOAD + b"\n"
        enqueue = [*mq, "enqueue", "-q", "q", "--lines", "--silent"]
        took_in, _ = self.group([enqueue], url, stdin=lines * self.count)
        self.sql("mqbench_pg", "ANALYZE")
        drain = [*mq, "drain", "-q", "q", "--handler", "mqbench_jobs:noop", "--batch-size", "100",
                 "--concurrency", str(procs), "--json"]  # fmt: skip
        took, outs = self.group([drain] * procs, url)
        reports = [json.loads(out) for out in outs]
        if any(r["failed"] or r["lost"] or r["busy"] for r in reports):
            raise SystemExit(f"mq drain: {reports}")
        left = self.sql("mqbench_pg", "SELECT count(*) FROM mq_messages")
        self.check("mq", left, sum(r["succeeded"] for r in reports))
        return self.count / took_in, self.count / took

    def procrastinate(self, procs: int, fast: bool = False) -> tuple[float, float]:
        db = DATABASES["procrastinate"]
        url = self.fresh(db)
        cli = [str(self.peers / "bin" / "procrastinate"), "--app=mqbench_procrastinate.app",
               "--log-level", "warning"]  # fmt: skip
        self.group([[*cli, "schema", "--apply"]], url)
        task = "noop_async" if fast else "noop"
        enqueue = "import sys, mqbench_procrastinate as m; m.enqueue(int(sys.argv[1]), sys.argv[2])"
        py = str(self.peers / "bin" / "python")
        took_in, _ = self.group([[py, "-c", enqueue, str(self.count), task]], url)
        self.sql(db, "ANALYZE")
        worker = [*cli, "worker", "--one-shot"]
        if fast:
            worker += ["--concurrency", "10", "--delete-jobs", "successful"]
        took, _ = self.group([worker] * procs, url)
        # Deleted when done (fast), else kept as succeeded: either way, count what is not.
        left = self.sql(db, "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'")
        kept = self.sql(db, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        self.check(PROCRASTINATE_FAST if fast else PROCRASTINATE, left,
                   self.count - left if fast else kept)  # fmt: skip
        return self.count / took_in, self.count / took

    def pgqueuer(self, procs: int, driver: str, fast: bool = False) -> tuple[float, float]:
        db = DATABASES["pgqueuer"]
        url = self.fresh(db)
        script = [str(self.peers / "bin" / "python"), str(JOBS / "mqbench_pgqueuer.py")]
        env = {"MQBENCH_PGQ_DRIVER": driver}
        if fast:  # read by pgqueuer's own settings (install) and by the job module (run)
            env.update(PGQUEUER_DURABILITY="balanced", MQBENCH_PGQ_BATCH="100")
        self.group([[*script, "install"]], url, extra=env)
        took_in, _ = self.group([[*script, "enqueue", str(self.count)]], url, extra=env)
        self.sql(db, "ANALYZE")
        took, _ = self.group([[*script, "drain"]] * procs, url, extra=env)
        left = self.sql(db, "SELECT count(*) FROM pgqueuer")
        done = self.sql(db, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
        self.check("pgqueuer", left, done)
        return self.count / took_in, self.count / took

    def measures(self) -> dict[str, Callable[[int], tuple[float, float]]]:
        return {
            FLOOR_EACH: lambda procs: self.floor(procs, "each"),
            FLOOR_BATCH: lambda procs: self.floor(procs, "many"),
            "mq": self.mq,
            "mq group_ack": lambda procs: self.mq(procs, group_ack=True),
            PROCRASTINATE: self.procrastinate,
            PROCRASTINATE_FAST: lambda procs: self.procrastinate(procs, fast=True),
            PGQUEUER: lambda procs: self.pgqueuer(procs, "asyncpg"),
            PGQUEUER_FAST: lambda procs: self.pgqueuer(procs, "asyncpg", fast=True),
            PGQUEUER_PSYCOPG: lambda procs: self.pgqueuer(procs, "psycopg"),
        }

    def clean(self) -> None:
        for database in ("mqbench_pg", *DATABASES.values()):
            self.drop(database)
        shutil.rmtree(self.tmp, ignore_errors=True)


def ensure_venv(venv: Path, packages: Sequence[str], modules: str) -> None:
    """A venv of peers that import ``modules``; made or completed with ``packages``."""
    python = venv / "bin" / "python"
    probe = f"import {modules}"
    if python.exists() and subprocess.run([str(python), "-c", probe]).returncode == 0:
        return
    print(f"installing into {venv}: {' '.join(packages)}", file=sys.stderr)
    if not python.exists():  # the interpreter itself, not a pyenv shim (as bench/run)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *packages], check=True)


def ensure_peers(venv: Path) -> None:
    ensure_venv(venv, PEERS, "asyncpg, pgqueuer, procrastinate, psycopg")


def version(venv: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def run_all(
    bench: Bench, procs_list: Sequence[int], rounds: int, only: Sequence[str] | None = None
) -> dict[str, Any]:
    """Every system at every process count, ``rounds`` times interleaved (the machine is
    shared: drift then hits every row alike); the runs of each row, kept as JSON."""
    with psycopg.connect(bench.url, autocommit=True, sslmode="disable") as conn:
        server = {name: str(conn.execute(f"SHOW {name}").fetchone()[0])
                  for name in ("server_version", "synchronous_commit")}  # fmt: skip
    load_before = os.getloadavg()
    started = time.time()
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for round_ in range(1, rounds + 1):
        for procs in procs_list:
            for system, measure in bench.measures().items():
                if only and system not in only:
                    continue
                into, out = measure(procs)
                row = rows.setdefault((system, procs), {
                    "system": system, "parallel": procs, "runs": [], "enqueue_runs": [],
                    "loads": [],
                })  # fmt: skip
                row["runs"].append(out)
                row["enqueue_runs"].append(into)
                row["loads"].append(os.getloadavg()[0])
                print(f"round {round_}, {system}, {procs} proc(s): enqueue {into:,.0f}, "
                      f"drain {out:,.0f} msg/s, load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    for row in rows.values():
        row["rate"], row["enqueue_rate"] = max(row["runs"]), max(row["enqueue_runs"])
    return {
        "count": bench.count,
        "payload_bytes": len(PAYLOAD),
        "rounds": rounds,
        "procs": list(procs_list),
        "server": server,
        "versions": {p: version(bench.peers, p) for p in ("procrastinate", "pgqueuer", "asyncpg")},
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "seconds": time.time() - started,
        "systems": list(SYSTEMS),  # the table's order
        "same_enqueue": SAME_ENQUEUE,
        # Which row is which, for bench/report.py's targets (names are for people).
        "roles": {
            "floor": FLOOR_EACH,
            "floor_batch": FLOOR_BATCH,
            "mq": "mq",
            "group_ack": "mq group_ack",
            "pgqueuer_fastest": PGQUEUER_FAST,
        },  # fmt: skip
        "ratios": [list(r) for r in RATIOS],
        "rows": list(rows.values()),
    }


def main() -> None:
    if sys.argv[1:2] == ["floor-drain"]:
        return floor_drain(sys.argv[2], sys.argv[3])
    if sys.argv[1:2] == ["floor-insert"]:
        return floor_insert(sys.argv[2], int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--peers-venv", type=Path, default=ROOT / "bench" / "peers-venv")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--procs", default="1,2,4", help="worker processes, comma-separated")
    parser.add_argument("--only", action="append", choices=SYSTEMS, help="some systems only")
    args = parser.parse_args()
    ensure_peers(args.peers_venv)
    bench = Bench(args.url, args.peers_venv.absolute(), args.messages)
    try:
        result = run_all(bench, [int(p) for p in args.procs.split(",")], args.rounds, args.only)
    finally:
        bench.clean()
    print(postgres_heading(result) + "\n")
    print("\n".join(postgres_table(result)))


if __name__ == "__main__":
    main()
