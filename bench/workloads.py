"""The sections that drive mq through its real CLI (and their floors), one function each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from common import (
    BENCH_DIR,
    MQ,
    PAYLOAD_SIZE,
    PY,
    QUEUE,
    ROOT,
    TABLE,
    Target,
    check_ok,
    last_noise,
    log,
    median,
    mq_env,
    mysql_params,
    payload,
    run_group,
    wait_quiet,
)

FLOOR = str(BENCH_DIR / "floor.py")
INPROC = str(BENCH_DIR / "inproc.py")


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


# -- enqueue ----------------------------------------------------------------


def write_lines(path: Path, count: int, size: int = PAYLOAD_SIZE) -> None:
    with open(path, "wb") as fh:
        for start in range(0, count, 10_000):
            fh.write(
                b"".join(payload(n, size) + b"\n" for n in range(start, min(count, start + 10_000)))
            )


def enqueue_lines(t: Target, count: int, workdir: Path) -> dict[str, Any]:
    """`mq enqueue --lines` of ``count`` 200-byte JSON lines (ids printed into /dev/null)."""
    t.reset()
    lines = workdir / f"lines-{count}.jsonl"
    if not lines.exists():
        write_lines(lines, count)
    argv = [MQ, "-c", str(t.config), "enqueue", "-q", QUEUE, "--lines"]
    wall, procs = run_group(
        [argv], env=t.env(), cwd=workdir, stdin_path=lines, keep_stdout=False, rss=True
    )
    check_ok(procs, "mq enqueue --lines")
    stored = t.count()
    return {
        "count": count,
        "wall": wall,
        "rate": rate(count, wall),
        "peak_rss_mb": procs[0].maxrss_kb / 1024,
        "ok": stored == count,
        "noise": last_noise(),
    }


def enqueue_api(t: Target, count: int, workdir: Path) -> dict[str, Any]:
    """mq_cli.connect(...).enqueue_many of ``count`` dicts, timed inside the process."""
    t.reset()
    argv = [PY, INPROC, "enqueue-many", str(t.config), "--count", str(count)]
    wall, procs = run_group([argv], env=t.env(), cwd=workdir, rss=True)
    check_ok(procs, "enqueue_many")
    inner = procs[0].json()
    return {
        "count": count,
        "wall": wall,
        "seconds": inner["seconds"],
        "rate": rate(count, inner["seconds"]),
        "peak_rss_mb": procs[0].maxrss_kb / 1024,
        "ok": t.count() == count and inner["stored"] == count,
        "noise": last_noise(),
    }


def floor_insert(t: Target, count: int, workdir: Path) -> dict[str, Any]:
    """The floor of enqueue: mq's multi-row INSERT, 1,000 rows per transaction, bare loop."""
    t.reset()
    argv = [PY, FLOOR, "insert", t.url, "--count", str(count), "--rows", "1000"]
    wall, procs = run_group([argv], env=t.env(), cwd=workdir)
    check_ok(procs, "floor insert")
    inner = procs[0].json()
    return {
        "count": count,
        "wall": wall,
        "rate": rate(count, wall),
        "inner_rate": rate(count, inner["seconds"]),
        "ok": t.count() == count,
        "noise": last_noise(),
    }


def plain_install(home: Path) -> tuple[str, str]:
    """A venv that sees mq and its dependencies as a regular (non-editable) install would.

    Whatever bench/.venv holds (an editable install's finder, imported by every
    interpreter start, costs ~10 ms and would flatter mq's ratio to the
    baselines), here a .pth line puts the mq_cli being measured and
    bench/.venv's site-packages on sys.path, and `mq` is the same console
    script pip writes.
    """
    venv = home / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_paths()["purelib"]
    ours = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    code = str(common.CODE) if common.CODE else str(ROOT)
    Path(ours, "mqbench.pth").write_text(f"{code}\n{purelib}\n")
    mq = venv / "bin" / "mq"
    mq.write_text(
        f"#!{venv / 'bin' / 'python'}\n"
        "# -*- coding: utf-8 -*-\n"
        "import re\n"
        "import sys\n"
        "from mq_cli.cli import main\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(main())\n"
    )
    mq.chmod(0o755)
    return str(venv / "bin" / "python"), str(mq)


def cold_start(targets: list[Target], runs: int, workdir: Path) -> dict[str, Any]:
    """One-message `mq enqueue` cold start against its baselines, interleaved, median of ``runs``.

    SQLite: the zero-config default (no config file anywhere, $XDG_DATA_HOME/mq/mq.db)
    against `python -c "import click"`. MariaDB: with a config file, against a bare
    script importing click, PyMySQL and PyYAML that connects and runs SELECT 1.
    PostgreSQL: the same with psycopg, and psycopg's import alone.
    """
    home = workdir / "cold"
    empty = home / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    py, mq = plain_install(home)
    env = mq_env(
        XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"), HOME=str(home)
    )
    env.pop("PYTHONPATH")
    mysql = next((t for t in targets if t.kind == "mysql"), None)
    cases: dict[str, list[str]] = {
        "python_pass": [py, "-c", "pass"],
        "import_click": [py, "-c", "import click"],
        "mq_version": [mq, "--version"],
    }
    if any(t.kind == "sqlite" for t in targets):
        cases["mq_enqueue_sqlite_default"] = [mq, "enqueue", "-q", "cold", '{"n": 1}']
    if mysql is not None:
        p = mysql_params(mysql.url)
        connect = (
            f"c = pymysql.connect(host={p['host']!r}, port={p['port']}, user={p['user']!r}, "
            f"password={p['password']!r}, database={p['database']!r}"
        )
        script = "import click, pymysql, yaml\n{connect}{tls})\nk = c.cursor()\nk.execute('SELECT 1')\nk.fetchall()\nc.close()\n"
        cases["bare_mysql_select1"] = [
            py,
            "-c",
            script.format(connect=connect, tls=", ssl_disabled=True"),
        ]
        cases["bare_mysql_select1_tls_probe"] = [py, "-c", script.format(connect=connect, tls="")]
        cases["mq_enqueue_mysql_config"] = [
            mq, "-c", str(mysql.config), "enqueue", "-q", "cold", '{"n": 1}',
        ]  # fmt: skip
    postgres = next((t for t in targets if t.kind == "postgres"), None)
    if postgres is not None:
        cases["import_psycopg"] = [py, "-c", "import psycopg"]
        cases["bare_pg_select1"] = [py, "-c", (
            "import click, psycopg, yaml\n"
            f"c = psycopg.connect({postgres.url!r})\n"
            "c.execute('SELECT 1').fetchall()\nc.close()\n"
        )]  # fmt: skip
        cases["mq_enqueue_postgres_config"] = [
            mq, "-c", str(postgres.config), "enqueue", "-q", "cold", '{"n": 1}',
        ]  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(runs + 1):  # round 0 warms the page cache and creates the SQLite schema
        wait_quiet()  # once per round: each round runs every case once, back to back
        for name, argv in cases.items():
            wall, procs = run_group([argv], env=env, cwd=empty, keep_stdout=False, quiet=False)
            check_ok(procs, name)
            if round_:
                times[name].append(wall)
    result: dict[str, Any] = {"runs": runs}
    for name, values in times.items():
        result[name] = {"median_ms": median(values) * 1000, "min_ms": min(values) * 1000}
    stored = home / "data" / "mq" / "mq.db"
    result["sqlite_default_used"] = stored.exists()
    return result


def enqueue_gigabyte(
    t: Target, total_bytes: int, workdir: Path, line_size: int = 1000
) -> dict[str, Any]:
    """`mq enqueue --lines` fed ``total_bytes`` generated on the fly into the pipe (nothing on disk)."""
    t.reset()
    per_block = (1 << 20) // line_size
    lines_total = total_bytes // line_size
    template = [payload(n, line_size - 1) + b"\n" for n in range(per_block)]
    block = b"".join(template)

    def feed(pipe: Any) -> None:
        sent = 0
        while sent + per_block <= lines_total:
            pipe.write(block)
            sent += per_block
        if lines_total - sent:
            pipe.write(b"".join(template[: lines_total - sent]))

    argv = [MQ, "-c", str(t.config), "enqueue", "-q", QUEUE, "--lines"]
    wall, procs = run_group(
        [argv],
        env=t.env(),
        cwd=workdir,
        feed=feed,
        keep_stdout=False,
        rss=True,
        watch_children=True,
    )
    check_ok(procs, "mq enqueue --lines (1 GB)")
    stored = t.count()
    result = {
        "bytes": lines_total * line_size,
        "messages": lines_total,
        "line_size": line_size,
        "wall": wall,
        "rate": rate(lines_total, wall),
        "mb_per_s": lines_total * line_size / wall / 1e6,
        "peak_rss_mb": procs[0].maxrss_kb / 1024,
        "ok": stored == lines_total,
        "noise": last_noise(),
    }
    t.reset()  # give the gigabyte back
    return result


# -- drain ------------------------------------------------------------------


def drain_argv(
    t: Target, batch: int, parallel: int, handler: str | None = None, group_ack: bool = False
) -> list[str]:
    config = t.group_config if group_ack else t.config
    argv = [MQ, "-c", str(config), "drain", "-q", QUEUE, "--batch-size", str(batch)]
    argv += ["--concurrency", str(parallel), "--json"]
    if handler:
        argv += ["--handler", handler]
    return argv


def mq_drain(
    t: Target,
    count: int,
    batch: int,
    parallel: int,
    handler: str | None = None,
    watch: bool = False,
    env_extra: dict[str, str] | None = None,
    group_ack: bool = False,
) -> dict[str, Any]:
    """``parallel`` `mq drain` processes started together over ``count`` ready messages.

    Exactly once, by counting: the drains' `succeeded` sum to ``count``, none
    failed or lost an acknowledgement, and the table is empty afterwards.
    """
    t.reset()
    t.fill(count)
    argv = drain_argv(t, batch, parallel, handler, group_ack)
    env = t.env(**(env_extra or {}))
    wall, procs = run_group(
        [argv] * parallel, env=env, cwd=t.workdir, rss=True, watch_children=watch
    )
    check_ok(procs, "mq drain")
    reports = [p.json() for p in procs]
    succeeded = sum(r["succeeded"] for r in reports)
    left = t.count()
    ok = (
        succeeded == count
        and left == 0
        and not any(r["failed"] or r["lost"] or r["busy"] for r in reports)
    )
    return {
        "count": count,
        "batch": batch,
        "parallel": parallel,
        "group_ack": group_ack,
        "wall": wall,
        "rate": rate(count, wall),
        "inner_rate": rate(count, max(r["seconds"] for r in reports)),
        "split": [r["succeeded"] for r in reports],
        "left": left,
        "ok": ok,
        "peak_rss_mb": max(p.maxrss_kb for p in procs) / 1024,
        "worker_peak_rss_mb": max(p.children_peak_kb for p in procs) / 1024,
        "noise": last_noise(),
    }


def floor_drain(
    t: Target, count: int, batch: int, parallel: int, ack: str = "each"
) -> dict[str, Any]:
    t.reset()
    t.fill(count)
    argv = [PY, FLOOR, "drain", t.url, "--batch", str(batch), "--ack", ack]
    wall, procs = run_group([argv] * parallel, env=t.env(), cwd=t.workdir)
    check_ok(procs, "floor drain")
    reports = [p.json() for p in procs]
    succeeded = sum(r["succeeded"] for r in reports)
    left = t.count()
    return {
        "count": count,
        "batch": batch,
        "parallel": parallel,
        "ack": ack,
        "wall": wall,
        "rate": rate(count, wall),
        "inner_rate": rate(count, max(r["seconds"] for r in reports)),
        "retries": sum(r["retries"] for r in reports),
        "split": [r["succeeded"] for r in reports],
        "ok": succeeded == count and left == 0,
        "noise": last_noise(),
    }


def exactly_once(t: Target, count: int, batch: int, parallel: int) -> dict[str, Any]:
    """An id-recording handler: every enqueued id was handled exactly once."""
    t.reset()
    t.fill(count)
    expected = t.ids()
    record = Path(tempfile.mkdtemp(prefix="mqbench-ids-"))
    try:
        argv = drain_argv(t, batch, parallel, "mqbench_jobs:record")
        wall, procs = run_group(
            [argv] * parallel, env=t.env(MQBENCH_RECORD_DIR=str(record)), cwd=t.workdir
        )
        check_ok(procs, "mq drain (recording)")
        seen: list[int] = []
        for path in record.iterdir():
            seen += [int(x) for x in path.read_text().split()]
    finally:
        shutil.rmtree(record, ignore_errors=True)
    duplicates = len(seen) - len(set(seen))
    missing = len(set(expected) - set(seen))
    return {
        "count": count,
        "batch": batch,
        "parallel": parallel,
        "handled": len(seen),
        "duplicates": duplicates,
        "missing": missing,
        "left": t.count(),
        "wall": wall,
        "ok": duplicates == 0 and missing == 0 and len(seen) == count and t.count() == 0,
    }


# -- handler runner cost ----------------------------------------------------------


def runner_cost(t: Target, count: int, batch: int) -> dict[str, Any]:
    """mq's Drain in-process with its PythonRunner (child process, timeout-capable) vs inline."""
    out: dict[str, Any] = {"count": count, "batch": batch}
    for mode in ("inline", "runner", "inline", "runner"):  # twice, interleaved; the better of two
        t.reset()
        t.fill(count)
        argv = [PY, INPROC, "drain", str(t.config), "--runner", mode, "--batch", str(batch)]
        _, procs = run_group([argv], env=t.env(), cwd=t.workdir)
        check_ok(procs, f"drain {mode}")
        report = procs[0].json()
        assert report["succeeded"] == count and t.count() == 0, report
        out[f"{mode}_rate"] = max(out.get(f"{mode}_rate", 0.0), rate(count, report["seconds"]))
    out["ratio"] = out["runner_rate"] / out["inline_rate"]
    return out


def runner_micro(count: int, workdir: Path) -> dict[str, Any]:
    argv = [PY, INPROC, "runner-micro", "--count", str(count)]
    _, procs = run_group([argv], env=mq_env(), cwd=workdir)
    check_ok(procs, "runner micro")
    return procs[0].json()


# -- scale ------------------------------------------------------------------------


#: name, ready rows, and what else the table holds: (rows, Target.fill keywords);
#: rows of 1,000,000 scale with --quick's smaller size
SCENARIOS: list[tuple[str, int, list[tuple[int, dict[str, Any]]]]] = [
    ("10k ready", 10_000, []),
    ("1M ready", 1_000_000, []),
    ("1M ready + 1M failed", 1_000_000, [(1_000_000, {"status": "failed"})]),
    (
        "10k ready + 1M delayed at higher priority",
        10_000,
        [(1_000_000, {"delay_seconds": 86_400, "priority": 5})],
    ),
    (
        "10k ready + 1M retries in backoff at higher priority",
        10_000,
        [(1_000_000, {"delay_seconds": 3_600, "priority": 5, "errors": 3})],
    ),
    (
        "10k ready + 1M unique-key tombstones",
        10_000,
        [(1_000_000, {"status": "done", "delay_seconds": 86_400, "keys": "k"})],
    ),
    (
        "100 queues of 10k each",
        10_000,
        [(10_000, {"queue": f"other{i}"}) for i in range(99)],
    ),
]


def scale(t: Target, measure: int, big: int, rounds: int = 2) -> list[dict[str, Any]]:
    """Claim throughput (Backend.claim, 100 per claim, one DELETE per batch) against the backlog.

    Rows are bulk-loaded server-side and the claim is EXPLAINed right after the
    load, with whatever statistics the server has then (FIELD-NOTES trap 1).
    PostgreSQL's table is then vacuumed and analyzed as its autovacuum would
    have done within a minute of the load (Target.settle), and EXPLAINed again.
    Then `mq drain --max-messages` through the CLI on the same table. Claim loop
    and drain alternate ``rounds`` times (what they took is loaded back each
    time); the better of each is kept, as the drain section keeps the better of two.
    """
    results = []

    def sized(rows: int) -> int:
        return int(rows * big / 1_000_000) if rows >= 1_000_000 else rows

    for name, ready, others in SCENARIOS:
        ready = sized(ready)
        t.reset()
        load = 0.0
        for rows, fill in others:
            load += t.fill(sized(rows), **fill)
        load += t.fill(ready)
        plan = t.explain(100)
        settled = None
        if t.kind == "postgres":  # as autovacuum leaves a bulk-loaded table (Target.settle)
            started = time.perf_counter()
            t.settle()
            settled = {"seconds": time.perf_counter() - started, "explain": t.explain(100)}
        take = min(measure, ready)
        claims: list[dict[str, Any]] = []
        drains: list[float] = []
        for _ in range(rounds):  # the better of ``rounds`` (a claim loop lasts ~0.3 s: noise)
            argv = [PY, INPROC, "claim-loop", str(t.config), "--count", str(take)]
            argv += ["--batch", "100", "--max-seconds", "30"]
            _, procs = run_group([argv], env=t.env(), cwd=t.workdir)
            check_ok(procs, "claim loop")
            claims.append(procs[0].json())
            t.fill(claims[-1]["claimed"])  # what the claims took, back: the same backlog
            argv = drain_argv(t, 100, 1) + ["--max-messages", str(take), "--max-seconds", "30"]
            wall, procs = run_group([argv], env=t.env(), cwd=t.workdir)
            check_ok(procs, "mq drain (scale)")
            report = procs[0].json()
            drains.append(rate(report["succeeded"], wall))
            t.fill(report["succeeded"])
        claim = max(claims, key=lambda c: c["claim_rate"])
        result = {
            "scenario": name,
            "ready": ready,
            "others": sum(sized(rows) for rows, _ in others),
            "load_seconds": load,
            "explain": plan,
            "settled": settled,
            "claim_rate": claim["claim_rate"],
            "ms_per_claim": claim["ms_per_claim"],
            "claimed": claim["claimed"],
            "drain_rate": max(drains),
            "drained": report["succeeded"],
            "claim_runs": [c["claim_rate"] for c in claims],
            "drain_runs": drains,
        }
        log(
            f"  {t.label:7} {name:52} claim {result['claim_rate']:9.0f} msg/s "
            f"({result['ms_per_claim']:.2f} ms/claim)  drain {result['drain_rate']:7.0f} msg/s"
        )
        results.append(result)
    t.reset()
    return results


def table_bytes(t: Target) -> int:
    if t.kind == "sqlite":
        assert t.path
        return sum(os.path.getsize(t.path + s) for s in ("", "-wal") if os.path.exists(t.path + s))
    if t.kind == "postgres":
        return int(t.query("SELECT pg_total_relation_size(?::regclass)", (TABLE,))[0][0])
    rows = t.query(
        "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
        (TABLE,),
    )
    return int(rows[0][0]) if rows else 0


def timestamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")
