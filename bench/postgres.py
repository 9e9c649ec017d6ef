"""PostgreSQL figures: mq against its floor and two PostgreSQL queues, procrastinate and pgqueuer.

    .venv/bin/python bench/postgres.py [--url postgresql://postgres@127.0.0.1:5432/postgres]

Same workload for all: N messages of 199 bytes (MQ_BENCH_MESSAGES, default
5,000), a no-op handler, drained by 1, 2 and 4 worker processes started
together. Drain throughput = N / wall time from the start of the workers until
the last one exits (the queue is then checked empty: the run fails loudly
otherwise), interpreter start included, as a crontab line pays it. Enqueue
throughput = N / wall time of the enqueuing process, 1,000 messages per
statement or call:

- floor: mq's own statements (sql/postgres.sql) in a bare psycopg loop, each
  worker its own process: the claim of 100, then one `ack_delete` per message
  (as mq acknowledges), or one `ack_delete_many` per batch; enqueue = the
  multi-row `insert`, 1,000 rows per transaction;
- mq: `mq drain -q q --batch-size 100 --concurrency P` started P times;
  `mq enqueue --lines`; mq group_ack: the same with a config whose queue says
  `group_ack: true` (one `DELETE ... IN` per group, as the second floor);
- procrastinate: `procrastinate worker --one-shot --delete-jobs successful -c 1`
  started P times; `Task.batch_defer`;
- pgqueuer: `PgQueuer.run(batch_size=100, mode=drain)` started P times
  (bench/jobs/mqbench_pgqueuer.py); `Queries.enqueue` with lists. Over asyncpg
  (pgqueuer's README) and over a psycopg AsyncConnection (its PsycopgDriver).

The peers run from their own venv (--peers-venv, default bench/peers-venv,
created with `pip install procrastinate pgqueuer[asyncpg,psycopg] psycopg[binary]`
when missing):
they never become dependencies of mq. Every measurement gets a fresh database
(mqbench_pg, mqbench_procrastinate, mqbench_pgqueuer; dropped afterwards).
Best of --rounds (2) interleaved rounds. Prints a Markdown table, and under it
the ratios issue 22 sets targets for (RATIOS).
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

import psycopg

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "bench" / "jobs"
sys.path.insert(0, str(ROOT))

from mq_cli.backends.postgres import queries  # noqa: E402

MESSAGES = int(os.environ.get("MQ_BENCH_MESSAGES", 5_000))
PAYLOAD = b'{"n": 1, "pad": "' + b"x" * 180 + b'"}'
PEERS = ("procrastinate", "pgqueuer[asyncpg,psycopg]", "psycopg[binary]")
SYSTEMS = ("floor: claim 100 + DELETE each", "floor: claim 100 + one DELETE ... IN per batch",
           "mq", "mq group_ack", "procrastinate", "pgqueuer, asyncpg driver",
           "pgqueuer, psycopg driver")  # fmt: skip
# The ratios printed under the table: (name, numerator row, denominator row).
RATIOS = (("mq / commit-each floor", "mq", SYSTEMS[0]),
          ("mq group_ack / one-statement floor", "mq group_ack", SYSTEMS[1]),
          ("mq group_ack / pgqueuer (asyncpg)", "mq group_ack", "pgqueuer, asyncpg driver"))  # fmt: skip
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
    def __init__(self, url: str, peers: Path, count: int) -> None:
        self.url = url
        self.peers = peers
        self.count = count
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
        env["PYTHONPATH"] = f"{ROOT}:{JOBS}"
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

    def procrastinate(self, procs: int) -> tuple[float, float]:
        db = DATABASES["procrastinate"]
        url = self.fresh(db)
        cli = [str(self.peers / "bin" / "procrastinate"), "--app=mqbench_procrastinate.app",
               "--log-level", "warning"]  # fmt: skip
        self.group([[*cli, "schema", "--apply"]], url)
        enqueue = "import sys, mqbench_procrastinate as m; m.enqueue(int(sys.argv[1]))"
        py = str(self.peers / "bin" / "python")
        took_in, _ = self.group([[py, "-c", enqueue, str(self.count)]], url)
        self.sql(db, "ANALYZE")
        worker = [*cli, "worker", "--one-shot", "--delete-jobs", "successful", "-c", "1"]
        took, _ = self.group([worker] * procs, url)
        # Successful jobs are deleted: any row left is a job not done (or failed).
        left = self.sql(db, "SELECT count(*) FROM procrastinate_jobs")
        self.check("procrastinate", left, self.count - left)
        return self.count / took_in, self.count / took

    def pgqueuer(self, procs: int, driver: str) -> tuple[float, float]:
        db = DATABASES["pgqueuer"]
        url = self.fresh(db)
        script = [str(self.peers / "bin" / "python"), str(JOBS / "mqbench_pgqueuer.py")]
        env = {"MQBENCH_PGQ_DRIVER": driver}
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
            SYSTEMS[0]: lambda procs: self.floor(procs, "each"),
            SYSTEMS[1]: lambda procs: self.floor(procs, "many"),
            "mq": self.mq,
            "mq group_ack": lambda procs: self.mq(procs, group_ack=True),
            "procrastinate": self.procrastinate,
            SYSTEMS[5]: lambda procs: self.pgqueuer(procs, "asyncpg"),
            SYSTEMS[6]: lambda procs: self.pgqueuer(procs, "psycopg"),
        }


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
    procs_list = [int(p) for p in args.procs.split(",")]
    bench = Bench(args.url, args.peers_venv.absolute(), args.messages)
    with psycopg.connect(args.url, autocommit=True, sslmode="disable") as conn:
        server = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    load_before = os.getloadavg()
    started = time.time()
    enqueue: dict[str, float] = {}
    drain: dict[tuple[str, int], float] = {}
    for round_ in range(1, args.rounds + 1):  # interleaved: the machine is shared
        for procs in procs_list:
            for system, measure in bench.measures().items():
                if args.only and system not in args.only:
                    continue
                into, out = measure(procs)
                key = system.split(":")[0]  # both floors load with the same INSERT
                enqueue[key] = max(enqueue.get(key, 0.0), into)
                drain[system, procs] = max(drain.get((system, procs), 0.0), out)
                print(f"round {round_}, {system}, {procs} proc(s): enqueue {into:,.0f}, "
                      f"drain {out:,.0f} msg/s, load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr)  # fmt: skip
    for database in ("mqbench_pg", *DATABASES.values()):
        bench.drop(database)
    shutil.rmtree(bench.tmp, ignore_errors=True)
    load_after = os.getloadavg()
    versions = ", ".join(
        f"{p} {version(args.peers_venv, p)}" for p in ("procrastinate", "pgqueuer", "asyncpg")
    )
    print(f"PostgreSQL {server[0] if server else '?'} (synchronous_commit={sync[0] if sync else '?'}), "
          f"{os.cpu_count()} CPUs, {versions}; {args.messages:,} messages of {len(PAYLOAD)} bytes, "
          f"no-op handler; best of {args.rounds} interleaved rounds; {time.time() - started:.0f} s; "
          f"load average {' / '.join(f'{x:.1f}' for x in load_before)} before, "
          f"{' / '.join(f'{x:.1f}' for x in load_after)} after\n")  # fmt: skip
    heads = " | ".join(f"drain, {p} proc{'s' if p > 1 else ''}" for p in procs_list)
    print(f"| what | enqueue msgs/s | {heads} |")
    print("| --- | --- |" + " --- |" * len(procs_list))
    for system in SYSTEMS:
        if (system, procs_list[0]) not in drain:
            continue
        cell = (
            ""
            if system in (SYSTEMS[1], "mq group_ack")
            else f"{enqueue[system.split(':')[0]]:,.0f}"
        )
        cells = " | ".join(f"{drain[system, p]:,.0f}" for p in procs_list)
        print(f"| {system} | {cell} | {cells} |")
    print()
    for name, over, under in RATIOS:
        if (over, procs_list[0]) in drain and (under, procs_list[0]) in drain:
            cells = ", ".join(f"{drain[over, p] / drain[under, p]:.2f}x at {p}" for p in procs_list)
            print(f"- {name}: {cells}")


if __name__ == "__main__":
    main()
