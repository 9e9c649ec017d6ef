"""mq's benchmark: throughput, scale, memory and cold start on MariaDB and SQLite,
against the floor (mq's own SQL in a bare loop) and peers (RQ, huey); the scale
section on PostgreSQL too, and the postgres section: PostgreSQL's drain against
its floors and its peers (procrastinate, pgqueuer), through bench/postgres.py.

Run it with `bench/run` (which sets up bench/.venv); see bench/README.md.
Prints a Markdown table, writes bench/results/latest.json and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import common
import workloads as w
from common import (
    BENCH_DIR,
    MQ,
    Target,
    code_fingerprint,
    fsync_latency,
    git_head,
    load_average,
    log,
    machine_info,
    mariadb_settings,
    other_db_clients,
    use_code,
    wait_for_servers,
)
from report import render, targets

SECTIONS = ["enqueue", "coldstart", "floor", "drain", "exec", "runner", "scale", "memory", "peers",
            "postgres"]  # fmt: skip
RESULTS = BENCH_DIR / "results"
PEERS_VENV = BENCH_DIR / "peers-venv"  # procrastinate and pgqueuer: never mq's dependencies

FULL = {
    "enqueue": 100_000,
    "cold_runs": 20,
    "drain": 20_000,
    "exec": 2_000,
    "exactly_once": 5_000,
    "runner": 20_000,
    "scale_big": 1_000_000,
    "scale_measure": 10_000,
    "memory_drain": 100_000,
    "gigabyte": 1 << 30,
    "rq": 2_000,
    "rq_simple": 2_000,
    "huey": 10_000,
    "postgres": 5_000,  # MQ_BENCH_MESSAGES overrides it, as for bench/postgres.py
    "postgres_rounds": 2,
}
QUICK = {
    "enqueue": 10_000,
    "cold_runs": 5,
    "drain": 2_000,
    "exec": 200,
    "exactly_once": 500,
    "runner": 2_000,
    "scale_big": 100_000,
    "scale_measure": 2_000,
    "memory_drain": 10_000,
    "gigabyte": 64 << 20,
    "rq": 200,
    "rq_simple": 200,
    "huey": 1_000,
    "postgres": 1_000,
    "postgres_rounds": 1,
}
BATCHES = (1, 10, 100)
PARALLEL = (1, 2, 4)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run",
        description="mq benchmark on MariaDB and SQLite (see bench/README.md).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes: a smoke run of a few minutes"
    )
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}; "
        "results are merged into the last latest.json",
    )  # fmt: skip
    parser.add_argument(
        "--backend",
        action="append",
        choices=["mysql", "postgres", "sqlite"],
        help="only this database (repeatable); PostgreSQL is measured by the scale and postgres "
        "sections only",
    )
    parser.add_argument(
        "--mysql-url", default="mysql://root@127.0.0.1:3306/mqbench",
        help="MariaDB to use; its database (default mqbench) is DROPPED and recreated",
    )  # fmt: skip
    parser.add_argument(
        "--pg-url", default="postgresql://postgres@127.0.0.1:5432/mqbench",
        help="PostgreSQL to use (scale and postgres sections); its database (default mqbench) "
        "is DROPPED and recreated, through the server's 'postgres' database; the postgres "
        "section also drops and recreates mqbench_pg, mqbench_procrastinate and mqbench_pgqueuer",
    )  # fmt: skip
    parser.add_argument(
        "--redis-url", default="redis://127.0.0.1:6379/15",
        help="Redis database for RQ; must hold nothing but RQ keys (it is flushed)",
    )  # fmt: skip
    parser.add_argument(
        "--code", default="worktree", metavar="worktree|live|REV",
        help="what mq_cli to measure: a copy of the working tree taken at start (default), "
        "the live working tree, or a git revision (e.g. HEAD; read with git archive)",
    )  # fmt: skip
    parser.add_argument(
        "--wait-quiet", type=float, default=0.0, metavar="SECONDS",
        help="before each measurement, wait up to SECONDS until other processes use less "
        "than 0.2 of a core (the machine is shared); 0 = do not wait",
    )  # fmt: skip
    parser.add_argument("--out", default=str(RESULTS / "latest.json"), help="where the JSON goes")
    return parser.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.sizes = QUICK if args.quick else FULL
        self.sections = args.only or SECTIONS
        self.workdir = Path(tempfile.mkdtemp(prefix="mqbench-"))
        kinds = args.backend or ["mysql", "sqlite", "postgres"]
        if not {"scale", "postgres", "coldstart"} & set(self.sections):  # PostgreSQL: these only
            kinds = [k for k in kinds if k != "postgres"]
        db_name = args.mysql_url.rstrip("/").rsplit("/", 1)[-1]
        if "mysql" in kinds and not db_name.startswith("mqbench"):
            raise SystemExit(
                f"bench: refusing to drop database {db_name!r}: use a name starting with mqbench"
            )
        self.targets: list[Target] = []
        for kind in kinds:
            if kind == "mysql":
                self.targets.append(Target("mysql", args.mysql_url, self.workdir / "mysql"))
            elif kind == "postgres":
                common.pg_database(args.pg_url)  # refuses a name not starting with mqbench
                self.targets.append(Target("postgres", args.pg_url, self.workdir / "postgres"))
            else:
                path = self.workdir / "sqlite" / "mq.db"
                self.targets.append(Target("sqlite", f"sqlite:///{path}", self.workdir / "sqlite"))
        # The sections other than scale drive MariaDB and SQLite (floor.py, peers, ...).
        self.classic = [t for t in self.targets if t.kind != "postgres"]
        self.results: dict[str, Any] = {}
        common.QUIET["max_wait"] = args.wait_quiet
        self.code, self.code_fingerprint = use_code(args.code, self.workdir)

    def unit(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One measurement; retried when it fails (the test suite restarts MariaDB at times)."""
        for attempt in range(3):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if attempt == 2:
                    raise
                lines = [ln for ln in str(exc).splitlines() if ln.strip()]
                why = lines[-1][:200] if lines else type(exc).__name__
                log(f"  {fn.__name__} failed ({why}); retrying")
                self.results.setdefault("meta", {}).setdefault("retries", []).append(
                    f"{fn.__name__}: {why}"
                )
                wait_for_servers(self.targets)

    def section(self, name: str, fn: Any) -> None:
        started = time.monotonic()
        # A failure merged in from an earlier run is that run's, not this one's.
        self.results.get("errors", {}).pop(name, None)
        try:
            fn()
        except Exception as exc:
            log(f"bench: section {name} failed: {type(exc).__name__}: {exc}")
            self.results.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        finally:
            timing = self.results["meta"].setdefault("section_seconds", {})
            timing[name] = round(time.monotonic() - started)

    def want(self, section: str) -> bool:
        return section in self.sections

    def run(self) -> dict[str, Any]:
        started = time.time()
        r = self.results
        r["meta"] = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "quick": self.args.quick,
            "sections": self.sections,
            "sizes": self.sizes,
            "machine": machine_info(),
            "git": git_head(),
            "code": self.code,
            "code_fingerprint": self.code_fingerprint,
            "code_at_start": code_fingerprint(),
            "mq": MQ,
            "fsync": [fsync_latency(self.workdir)],
        }
        if any(t.kind == "mysql" for t in self.targets):
            r["meta"]["mariadb"] = mariadb_settings(self.args.mysql_url)
            r["meta"]["other_db_sessions_at_start"] = other_db_clients(self.args.mysql_url)
        if any(t.kind == "postgres" for t in self.targets):
            r["meta"]["postgres"] = common.postgres_settings(self.args.pg_url)
        for t in self.targets:
            t.create()
        try:
            if self.want("enqueue") or self.want("floor"):
                self.section("enqueue", self.enqueue)
            if self.want("coldstart"):
                self.section("coldstart", self.coldstart)
            r["meta"]["fsync"].append(fsync_latency(self.workdir))
            if self.want("drain") or self.want("floor"):
                self.section("drain", self.drain)
            if self.want("exec"):
                self.section("exec", self.exec_drain)
            if self.want("runner"):
                self.section("runner", self.runner)
            r["meta"]["fsync"].append(fsync_latency(self.workdir))
            if self.want("scale"):
                self.section("scale", self.scale)
            if self.want("memory"):
                self.section("memory", self.memory)
            if self.want("peers"):
                self.section("peers", self.peers)
            if self.want("postgres") and any(t.kind == "postgres" for t in self.targets):
                self.section("postgres", self.postgres)
        finally:
            r["meta"]["fsync"].append(fsync_latency(self.workdir))
            r["meta"]["code_at_end"] = code_fingerprint()
            r["meta"]["load_average_at_end"] = load_average()
            if any(t.kind == "mysql" for t in self.targets):
                r["meta"]["other_db_sessions_at_end"] = other_db_clients(self.args.mysql_url)
            r["meta"]["seconds"] = time.time() - started
            for t in self.targets:
                if t.kind == "postgres":
                    t.drop()
            shutil.rmtree(self.workdir, ignore_errors=True)
        return r

    # -- sections ------------------------------------------------------------

    def enqueue(self) -> None:
        n = self.sizes["enqueue"]
        out = self.results.setdefault("enqueue", {})
        for t in self.classic:
            log(f"== enqueue {n} messages, {t.label}")
            row: dict[str, Any] = {}
            if self.want("floor"):
                row["floor_insert"] = self.unit(w.floor_insert, t, n, self.workdir)
                log(f"  floor multi-row INSERT : {row['floor_insert']['rate']:9.0f} msg/s")
            if self.want("enqueue"):
                row["lines"] = self.unit(w.enqueue_lines, t, n, self.workdir)
                log(f"  mq enqueue --lines     : {row['lines']['rate']:9.0f} msg/s")
                row["api"] = self.unit(w.enqueue_api, t, n, self.workdir)
                log(f"  API enqueue_many       : {row['api']['rate']:9.0f} msg/s")
            if self.want("floor"):  # again after mq: the better of two, drift shows
                again = self.unit(w.floor_insert, t, n, self.workdir)
                first = row["floor_insert"]
                row["floor_insert"] = max(first, again, key=lambda x: x["rate"])
                row["floor_insert"]["runs"] = [first["rate"], again["rate"]]
            if self.want("enqueue"):
                again = self.unit(w.enqueue_lines, t, n, self.workdir)
                first = row["lines"]
                row["lines"] = max(first, again, key=lambda x: x["rate"])
                row["lines"]["runs"] = [first["rate"], again["rate"]]
            out[t.kind] = row

    def coldstart(self) -> None:
        log("== cold start")
        self.results["coldstart"] = self.unit(
            w.cold_start, self.targets, self.sizes["cold_runs"], self.workdir
        )

    def drain(self) -> None:
        n = self.sizes["drain"]
        out = self.results.setdefault("drain", {})
        for t in self.classic:
            log(f"== drain {n} messages, no-op Python handler, {t.label}")
            rows = out.setdefault(t.kind, {"mq": [], "floor": [], "floor_batch_delete": []})
            if self.want("drain"):
                rows["mq"] = []
            if self.want("floor"):
                rows["floor"], rows["floor_batch_delete"] = [], []
            for batch in BATCHES:
                for par in PARALLEL:
                    line = f"  batch {batch:3} x {par} proc:"
                    if self.want("floor"):
                        f = self.unit(w.floor_drain, t, n, batch, par)
                        rows["floor"].append(f)
                        line += f" floor {f['rate']:7.0f}"
                    if self.want("drain"):
                        m = self.unit(w.mq_drain, t, n, batch, par)
                        rows["mq"].append(m)
                        line += f"  mq {m['rate']:7.0f} msg/s  ok={m['ok']} split={m['split']}"
                    log(line)
            if self.want("drain"):
                rows["group_ack"] = []
            for par in PARALLEL:
                line = f"  one acknowledgement per batch of 100 x {par} proc:"
                if self.want("floor"):
                    f = self.unit(w.floor_drain, t, n, 100, par, ack="batch")
                    rows["floor_batch_delete"].append(f)
                    line += f" floor {f['rate']:7.0f}"
                if self.want("drain"):
                    m = self.unit(w.mq_drain, t, n, 100, par, group_ack=True)
                    rows["group_ack"].append(m)
                    line += f"  mq group_ack {m['rate']:7.0f} msg/s  ok={m['ok']}"
                log(line)
            if self.want("drain"):
                # The headline pairs again, interleaved, so drift hits both alike.
                for par in (1, 4):
                    m = self.unit(w.mq_drain, t, n, 100, par)
                    rows.setdefault("repeat", []).append(m)
                    if self.want("floor"):
                        f = self.unit(w.floor_drain, t, n, 100, par)
                        rows.setdefault("floor_repeat", []).append(f)
                m = self.sizes["exactly_once"]
                checks = [self.unit(w.exactly_once, t, m, batch, 4) for batch in BATCHES]
                rows["exactly_once"] = checks
                log("  exactly once (id-recording handler, 4 procs): " + ", ".join(
                    f"batch {c['batch']}: {'ok' if c['ok'] else 'FAILED'}" for c in checks
                ))  # fmt: skip

    def exec_drain(self) -> None:
        n = self.sizes["exec"]
        out = self.results.setdefault("exec", {})
        for t in self.classic:
            log(f"== drain {n} messages, exec:/bin/true, {t.label}")
            rows = []
            for batch in BATCHES:
                for par in PARALLEL:
                    m = self.unit(w.mq_drain, t, n, batch, par, handler="exec:/bin/true")
                    rows.append(m)
                    log(f"  batch {batch:3} x {par} proc: mq {m['rate']:7.0f} msg/s ok={m['ok']}")
            out[t.kind] = rows

    def runner(self) -> None:
        n = self.sizes["runner"]
        out = self.results.setdefault("runner", {})
        out["micro"] = self.unit(w.runner_micro, n, self.workdir)
        log(
            f"== runner: a message through PythonRunner {out['micro']['runner_us']:.1f} us, "
            f"inline {out['micro']['inline_us']:.1f} us"
        )
        for t in self.classic:
            rows = [self.unit(w.runner_cost, t, n, batch) for batch in (10, 100)]
            for r in rows:
                log(
                    f"  {t.label} batch {r['batch']}: runner {r['runner_rate']:.0f} msg/s, "
                    f"inline {r['inline_rate']:.0f} msg/s, ratio {r['ratio']:.2f}"
                )
            out[t.kind] = rows

    def scale(self) -> None:
        out = self.results.setdefault("scale", {})
        for t in self.targets:
            log(f"== scale, {t.label}")
            out[t.kind] = self.unit(
                w.scale, t, self.sizes["scale_measure"], self.sizes["scale_big"]
            )

    def memory(self) -> None:
        out = self.results.setdefault("memory", {})
        for t in self.classic:
            log(f"== memory, {t.label}")
            n = self.sizes["memory_drain"]
            d = self.unit(w.mq_drain, t, n, 100, 1, watch=True)
            log(
                f"  drain of {n}: drain {d['peak_rss_mb']:.1f} MB + handler process "
                f"{d['worker_peak_rss_mb']:.1f} MB peak RSS, {d['rate']:.0f} msg/s, ok={d['ok']}"
            )
            g = self.unit(w.enqueue_gigabyte, t, self.sizes["gigabyte"], self.workdir)
            log(
                f"  enqueue --lines of {g['bytes'] / 1e9:.2f} GB: {g['peak_rss_mb']:.1f} MB peak RSS, "
                f"{g['rate']:.0f} msg/s, {g['mb_per_s']:.0f} MB/s, ok={g['ok']}"
            )
            out[t.kind] = {"drain": d, "gigabyte": g}

    def peers(self) -> None:
        from peers import run_peers

        log("== peers: RQ (Redis) and huey (SQLite), same no-op job")
        self.results["peers"] = run_peers(self.workdir, self.args.redis_url, self.sizes)

    def postgres(self) -> None:
        # Imported here: postgres.py puts the repository first on sys.path, which the
        # sections before it must not see (they measure the --code snapshot).
        import postgres as pg

        count = int(os.environ.get("MQ_BENCH_MESSAGES", self.sizes["postgres"]))
        log(f"== postgres: {count} messages, mq and its floors against procrastinate and "
            "pgqueuer, interleaved rounds")  # fmt: skip
        pg.ensure_peers(PEERS_VENV)
        server = urlunsplit(urlsplit(self.args.pg_url)._replace(path="/postgres"))
        bench = pg.Bench(server, PEERS_VENV, count, code=common.CODE or common.ROOT)
        try:
            self.results["postgres"] = pg.run_all(bench, PARALLEL, self.sizes["postgres_rounds"])
        except SystemExit as exc:  # postgres.py's way to fail a run; not the bench's exit
            raise RuntimeError(str(exc)) from None
        finally:
            bench.clean()


def merge(old: Any, new: Any) -> Any:
    """--only: keep what the last run measured and this one did not."""
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            merged[key] = value if key == "meta" else merge(old.get(key), value)
        return merged
    if isinstance(new, list) and not new:
        return old if old is not None else new
    return new


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    log(f"bench: sections {', '.join(bench.sections)}; {'quick' if args.quick else 'full'} sizes")
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        results = bench.run()
    except KeyboardInterrupt as exc:  # keep what was measured; rerun the rest with --only
        results = bench.results
        results["meta"]["interrupted"] = str(exc) or "SIGINT"
        log(f"bench: interrupted ({results['meta']['interrupted']}); writing what was measured")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.only and out.exists():
        previous = json.loads(out.read_text())
        if previous.get("meta", {}).get("quick") == args.quick:
            results = merge(previous, results)
            results["meta"]["merged_from"] = previous["meta"].get("date")
    results["targets"] = targets(results)
    out.write_text(json.dumps(results, indent=1, default=str))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    shutil.copy(out, out.parent / f"run-{stamp}.json")
    try:
        from plot import plot

        png = plot(results, out.parent / "drain_throughput.png")
        if png and not args.quick and not args.only:
            shutil.copy(png, BENCH_DIR / "drain_throughput.png")
    except Exception as exc:  # a missing plot must not lose the figures
        log(f"bench: no plot: {type(exc).__name__}: {exc}")
    print(render(results))
    log(f"bench: results in {out}; took {results['meta']['seconds'] / 60:.1f} min")
    return 1 if results["meta"].get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
