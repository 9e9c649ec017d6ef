"""The targets of the bench issue, checked against a results dict, and the Markdown table."""

from __future__ import annotations

from typing import Any

LABEL = {"mysql": "MariaDB", "postgres": "PostgreSQL", "sqlite": "SQLite"}
PROCS = (1, 2, 4)  # the process counts every issue-22 target holds at


def _best(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return max(found, key=lambda r: r["rate"]) if found else None


def drain_rate(
    results: dict[str, Any], kind: str, batch: int, par: int, which: str = "mq"
) -> float | None:
    section = results.get("drain", {}).get(kind, {})
    rows = list(section.get(which, []))
    rows += (
        section.get("repeat" if which == "mq" else "floor_repeat", [])
        if which in ("mq", "floor")
        else []
    )
    best = _best(rows, batch=batch, parallel=par)
    return best["rate"] if best else None


def peer_rate(results: dict[str, Any], key: str, workers: int) -> float | None:
    rows = results.get("peers", {}).get(key, [])
    found = [r["rate"] for r in rows if r["workers"] == workers]
    return max(found) if found else None


def postgres_rate(results: dict[str, Any], system: str | None, par: int) -> float | None:
    """The best drain of one row of the postgres section (bench/postgres.py's names)."""
    rows = results.get("postgres", {}).get("rows", [])
    found = [r["rate"] for r in rows if r["system"] == system and r["parallel"] == par]
    return max(found) if found else None


def _target(
    name: str, value: float | None, threshold: float, higher: bool, detail: str, unit: str = "x"
) -> dict[str, Any]:
    if value is None:
        return {
            "target": name,
            "value": None,
            "threshold": threshold,
            "verdict": "not run",
            "detail": detail,
        }
    ok = value >= threshold if higher else value <= threshold
    shown = f"{value:.2f}{unit}" if unit == "x" else f"{value:.1f} {unit}"
    return {
        "target": name,
        "value": value,
        "shown": shown,
        "threshold": f"{'>=' if higher else '<='} {threshold:g}{'x' if unit == 'x' else ' ' + unit}",
        "verdict": "pass" if ok else "MISS",
        "detail": detail,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _drain_pairs(results: dict[str, Any], kind: str, par: int) -> dict[str, float | None]:
    """mq's default drain, group_ack and their two floors (batch 100), on one backend."""
    if kind == "postgres":
        roles = results.get("postgres", {}).get("roles", {})
        return {key: postgres_rate(results, roles.get(key), par)
                for key in ("floor", "floor_batch", "mq", "group_ack")}  # fmt: skip
    return {
        "mq": drain_rate(results, kind, 100, par),
        "floor": drain_rate(results, kind, 100, par, "floor"),
        "group_ack": drain_rate(results, kind, 100, par, "group_ack"),
        "floor_batch": drain_rate(results, kind, 100, par, "floor_batch_delete"),
    }


def issue22_targets(results: dict[str, Any], kinds: list[str]) -> list[dict[str, Any]]:
    """Issue 22: on every backend, at 1, 2 and 4 processes, the default drain near its
    commit-each floor, group_ack near its one-statement floor and ahead of the fastest peer."""
    out = []
    for kind in kinds:
        db = LABEL[kind]
        for par in PROCS:
            got = _drain_pairs(results, kind, par)
            out.append(_target(
                f"{db}: drain batch 100, {par} proc / floor (claim 100 + DELETE each)",
                _ratio(got["mq"], got["floor"]), 0.85, True,
                f"mq {got['mq'] or 0:.0f} vs floor {got['floor'] or 0:.0f} msg/s",
            ))  # fmt: skip
            out.append(_target(
                f"{db}: drain with group_ack, batch 100, {par} proc / floor (claim 100 + one "
                "DELETE per batch)",
                _ratio(got["group_ack"], got["floor_batch"]), 0.8, True,
                f"mq {got['group_ack'] or 0:.0f} vs floor {got['floor_batch'] or 0:.0f} msg/s",
            ))  # fmt: skip
    fastest = results.get("postgres", {}).get("roles", {}).get("pgqueuer_fastest")
    for kind, peer, label in (("postgres", None, "pgqueuer (asyncpg), its fastest documented config"),
                              ("sqlite", "huey_process", "huey SqliteHuey, its fastest documented config (-k process)")):  # fmt: skip
        if kind not in kinds:
            continue
        for par in PROCS:
            mq = _drain_pairs(results, kind, par)["group_ack"]
            other = (postgres_rate(results, fastest, par) if peer is None
                     else peer_rate(results, peer, par))  # fmt: skip
            out.append(_target(
                f"{LABEL[kind]}: drain with group_ack, {par} proc / {label}, {par} worker"
                f"{'s' if par > 1 else ''}",
                _ratio(mq, other), 1.0, True, f"mq {mq or 0:.0f} vs {other or 0:.0f} msg/s",
            ))  # fmt: skip
    return out


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    kinds = [k for k in ("mysql", "sqlite") if k in results.get("drain", {}) or k in results.get("enqueue", {})
             or k in results.get("scale", {}) or k in results.get("memory", {}) or k in results.get("runner", {})]  # fmt: skip
    backends = (kinds or ["mysql", "sqlite"]) + ["postgres"]
    out += issue22_targets(results, backends)
    for kind in kinds or ["mysql", "sqlite"]:
        mq = drain_rate(results, kind, 100, 1)
        rq = peer_rate(results, "rq_simple", 1)
        out.append(_target(
            f"{LABEL[kind]}: drain batch 100, 1 proc / RQ SimpleWorker burst, 1 worker",
            _ratio(mq, rq), 10, True, f"mq {mq or 0:.0f} vs RQ {rq or 0:.0f} msg/s",
        ))  # fmt: skip
    mq = drain_rate(results, "sqlite", 100, 1)
    huey = peer_rate(results, "huey", 1)
    out.append(_target(
        "SQLite: drain batch 100, 1 proc / huey SqliteHuey consumer, 1 worker",
        _ratio(mq, huey), 2, True, f"mq {mq or 0:.0f} vs huey {huey or 0:.0f} msg/s",
    ))  # fmt: skip
    runner = results.get("runner", {})
    for kind in kinds or ["mysql", "sqlite"]:
        row = next((r for r in runner.get(kind, []) if r["batch"] == 100), None)
        out.append(_target(
            f"{LABEL[kind]}: drain with the timeout-capable runner / handler inline (batch 100)",
            row["ratio"] if row else None, 0.8, True,
            f"runner {row['runner_rate']:.0f} vs inline {row['inline_rate']:.0f} msg/s" if row else "",
        ))  # fmt: skip
    for kind in kinds or ["mysql", "sqlite"]:
        row = results.get("enqueue", {}).get(kind, {})
        lines, floor = row.get("lines"), row.get("floor_insert")
        out.append(_target(
            f"{LABEL[kind]}: enqueue --lines / floor multi-row INSERT",
            _ratio(lines["rate"] if lines else None, floor["rate"] if floor else None), 0.7, True,
            f"mq {lines['rate']:.0f} vs floor {floor['rate']:.0f} msg/s" if lines and floor else "",
        ))  # fmt: skip
    for kind in [k for k in ("mysql", "sqlite", "postgres") if k in results.get("scale", {})]:
        rows = results.get("scale", {}).get(kind, [])
        for row in rows[1:]:  # each against the 10k baseline, claim and whole drain
            for what in ("claim", "drain"):
                base, got = rows[0][f"{what}_rate"], row[f"{what}_rate"]
                out.append(_target(
                    f"{LABEL[kind]}: {what} rate, {row['scenario']} / 10k ready",
                    _ratio(got, base), 0.8, True, f"{got:.0f} vs {base:.0f} msg/s",
                ))  # fmt: skip
    for kind in kinds or ["mysql", "sqlite"]:
        mem = results.get("memory", {}).get(kind)
        d = mem["drain"] if mem else None
        out.append(_target(
            f"{LABEL[kind]}: drain peak RSS over a {d['count'] if d else 100_000:,} backlog (drain process)",
            d["peak_rss_mb"] if d else None, 60, False,
            f"+ handler process {d['worker_peak_rss_mb']:.1f} MB" if d else "", unit="MB",
        ))  # fmt: skip
        g = mem["gigabyte"] if mem else None
        out.append(_target(
            f"{LABEL[kind]}: enqueue --lines of {g['bytes'] / 1e9:.2f} GB peak RSS" if g else f"{LABEL[kind]}: enqueue --lines of 1 GB peak RSS",
            g["peak_rss_mb"] if g else None, 80, False,
            f"{g['messages']:,} lines of {g['line_size']} B at {g['mb_per_s']:.0f} MB/s" if g else "", unit="MB",
        ))  # fmt: skip
    cold = results.get("coldstart")
    if cold:
        if "mq_enqueue_sqlite_default" in cold:
            a, b = cold["mq_enqueue_sqlite_default"]["median_ms"], cold["import_click"]["median_ms"]
            out.append(_target(
                'SQLite zero-config: one-message `mq enqueue` / `python -c "import click"`',
                a / b, 1.5, False, f"{a:.0f} vs {b:.0f} ms (median of {cold['runs']})",
            ))  # fmt: skip
        if "mq_enqueue_mysql_config" in cold:
            a, b = (
                cold["mq_enqueue_mysql_config"]["median_ms"],
                cold["bare_mysql_select1"]["median_ms"],
            )
            out.append(_target(
                "MariaDB with config: one-message `mq enqueue` / bare click+PyMySQL+PyYAML SELECT 1",
                a / b, 1.3, False, f"{a:.0f} vs {b:.0f} ms (median of {cold['runs']})",
            ))  # fmt: skip
    checks = []
    for section in results.get("drain", {}).values():
        checks += [r["ok"] for r in section.get("mq", []) + section.get("repeat", [])]
        checks += [r["ok"] for r in section.get("exactly_once", [])]
    for rows in results.get("exec", {}).values():
        checks += [r["ok"] for r in rows]
    if checks:
        out.append({
            "target": "every drain ran each message exactly once (counts; id-recording runs)",
            "value": sum(checks), "shown": f"{sum(checks)}/{len(checks)} runs",
            "threshold": "all", "verdict": "pass" if all(checks) else "MISS", "detail": "",
        })  # fmt: skip
    return out


# -- the Markdown ------------------------------------------------------------


def _others(row: dict[str, Any] | None) -> str:
    if not row or "noise" not in row:
        return "–"
    return f"{row['noise']['others_cores']:.2f}"


def _noises(node: Any) -> list[float]:
    if isinstance(node, dict):
        found = [node["noise"]["others_cores"]] if isinstance(node.get("noise"), dict) else []
        return found + [x for k, v in node.items() if k != "noise" for x in _noises(v)]
    if isinstance(node, list):
        return [x for item in node for x in _noises(item)]
    return []


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def postgres_heading(pg: dict[str, Any]) -> str:
    """What the postgres section ran on: server, peers' versions, workload, load."""
    server, versions = pg.get("server", {}), pg.get("versions", {})
    loads = [" / ".join(f"{x:.1f}" for x in pg.get(k, [])) for k in ("load_before", "load_after")]
    return (
        f"PostgreSQL {server.get('server_version', '?')} (synchronous_commit="
        f"{server.get('synchronous_commit', '?')}), "
        + ", ".join(f"{name} {v}" for name, v in versions.items())
        + f"; {pg['count']:,} messages of {pg.get('payload_bytes', '?')} bytes, no-op handler; "
        f"best of {pg['rounds']} interleaved rounds; {pg.get('seconds', 0):.0f} s; "
        f"load average {loads[0]} before, {loads[1]} after"
    )


def postgres_table(pg: dict[str, Any]) -> list[str]:
    """The rows of the postgres section as bench/postgres.py prints them, then the ratios."""
    procs = pg["procs"]
    best = {(r["system"], r["parallel"]): r for r in pg["rows"]}
    same = pg.get("same_enqueue", {})

    def enqueue(system: str) -> str:
        if system in same:  # loads with another row's enqueue: shown once, there
            return ""
        rates = [r["enqueue_rate"] for r in pg["rows"]
                 if system in (r["system"], same.get(r["system"]))]  # fmt: skip
        return _fmt(max(rates)) if rates else "–"

    heads = [f"drain, {p} proc{'s' if p > 1 else ''}" for p in procs]
    lines = [
        "| what | enqueue msgs/s | " + " | ".join(heads) + " |",
        "| --- | --- |" + " --- |" * len(procs),
    ]
    for system in pg.get("systems", []):
        if not any((system, p) in best for p in procs):
            continue
        cells = " | ".join(_fmt(best[system, p]["rate"]) if (system, p) in best else "–"
                           for p in procs)  # fmt: skip
        lines.append(f"| {system} | {enqueue(system)} | {cells} |")
    lines.append("")
    for name, over, under in pg.get("ratios", []):
        cells = [f"{best[over, p]['rate'] / best[under, p]['rate']:.2f}x at {p}"
                 for p in procs if (over, p) in best and (under, p) in best]  # fmt: skip
        if cells:
            lines.append(f"- {name}: {', '.join(cells)}")
    return lines


def render(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    out: list[str] = []
    m = meta.get("machine", {})
    out.append(f"## mq bench, {meta.get('date')}{' (quick)' if meta.get('quick') else ''}\n")
    out.append(
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gb')} GB RAM, "
        f"Linux {m.get('kernel')}, Python {m.get('python')}, SQLite {m.get('versions', {}).get('sqlite')}, "
        f"PyMySQL {m.get('versions', {}).get('pymysql')}. Load average at start {m.get('load_average')}, "
        f"at end {meta.get('load_average_at_end')}. Code measured: {meta.get('code')} "
        f"(mq_cli fingerprint {meta.get('code_fingerprint')}; repository at {meta.get('git')}"
        f"{'' if meta.get('code_at_start') == meta.get('code_at_end') else '; the working tree changed during the run'}). "
        f"Run took {meta.get('seconds', 0) / 60:.1f} min."
    )
    if meta.get("interrupted"):
        out.append(f"\n**Interrupted ({meta['interrupted']}): the sections after it are missing.**")
    if meta.get("section_seconds"):
        out.append(
            "\nSeconds per section (waits for quiet included): "
            + ", ".join(f"{k} {v}" for k, v in meta["section_seconds"].items())
            + "."
        )
    if meta.get("retries"):
        out.append(f"\nRetried after a failure: {'; '.join(meta['retries'])}.")
    if results.get("errors"):
        out.append(f"\nSections that failed: {results['errors']}.")
    maria = meta.get("mariadb")
    if maria:
        out.append(
            f"\nMariaDB {maria['version']}: innodb_flush_log_at_trx_commit={maria['innodb_flush_log_at_trx_commit']}, "
            f"server isolation {maria['tx_isolation']} (mq's sessions: {maria['mq_session_isolation']}), "
            f"buffer pool {int(maria['innodb_buffer_pool_size']) >> 20} MB, redo log {int(maria['innodb_log_file_size']) >> 20} MB, "
            f"flush method {maria['innodb_flush_method']}, doublewrite {maria['innodb_doublewrite']}, "
            f"binlog {maria['log_bin']}. Other sessions on the server: "
            f"{meta.get('other_db_sessions_at_start')} at start, {meta.get('other_db_sessions_at_end')} at end."
        )
    noises = _noises({k: v for k, v in results.items() if k != "meta"})
    if noises:
        busy = sum(1 for x in noises if x >= 0.2)
        out.append(
            f"\nOther people's processes (not the bench, not the database servers) used on average "
            f"{sum(noises) / len(noises):.2f} cores during the measurements (max {max(noises):.2f}; "
            f"{busy} of {len(noises)} measurements with >= 0.2 core)."
        )
    fs = meta.get("fsync", [])
    if fs:
        out.append(
            "\nDisk flush latency (4 KiB write + fdatasync, median / p90 / max µs): "
            + "; ".join(
                f"{f['at']} {f['median_us']:.0f} / {f['p90_us']:.0f} / {f['max_us']:.0f}"
                for f in fs
            )
        )

    out.append("\n### Targets\n")
    out.append(table(
        ["target", "measured", "target", "verdict", "detail"],
        [[t["target"], t.get("shown", "–"), t["threshold"], t["verdict"], t["detail"]]
         for t in results.get("targets", [])],
    ))  # fmt: skip

    enq = results.get("enqueue")
    if enq:
        n = next(iter(enq.values())).get("lines", {}).get("count") or next(iter(enq.values())).get(
            "floor_insert", {}
        ).get("count")
        out.append(f"\n### Enqueue ({n:,} messages of 200 bytes; msg/s)\n")
        rows = []
        for kind, row in enq.items():
            lines, api, floor = row.get("lines"), row.get("api"), row.get("floor_insert")
            rows.append([
                LABEL[kind],
                _fmt(lines and lines["rate"]), _fmt(lines and lines["peak_rss_mb"], 1),
                _fmt(api and api["rate"]), _fmt(floor and floor["rate"]),
                _fmt(_ratio(lines and lines["rate"], floor and floor["rate"]), 2),
            ])  # fmt: skip
        out.append(table(
            ["database", "`mq enqueue --lines`", "its peak RSS MB", "API `enqueue_many`",
             "floor: multi-row INSERT, 1,000/txn", "--lines / floor"], rows,
        ))  # fmt: skip
        out.append(
            "\n`--lines` and the floor: wall time of the process (interpreter start included), "
            "best of two; `enqueue_many`: timed inside the process (an application's view)."
        )
    cold = results.get("coldstart")
    if cold:
        out.append(f"\n### Cold start (median wall time of {cold['runs']} runs, ms)\n")
        names = {
            "python_pass": '`python -c "pass"`',
            "import_click": '`python -c "import click"`',
            "mq_version": "`mq --version`",
            "mq_enqueue_sqlite_default": "`mq enqueue` one message, zero-config SQLite default",
            "bare_mysql_select1": "bare script: import click, PyMySQL, PyYAML; connect (TLS off); SELECT 1",
            "bare_mysql_select1_tls_probe": "the same, PyMySQL's default TLS probe",
            "mq_enqueue_mysql_config": "`mq -c mq.yaml enqueue` one message, MariaDB",
            "import_psycopg": '`python -c "import psycopg"`',
            "bare_pg_select1": "bare script: import click, psycopg, PyYAML; connect; SELECT 1",
            "mq_enqueue_postgres_config": "`mq -c mq.yaml enqueue` one message, PostgreSQL",
        }
        out.append(table(["command", "median ms", "min ms"], [
            [label, _fmt(cold[key]["median_ms"], 1), _fmt(cold[key]["min_ms"], 1)]
            for key, label in names.items() if key in cold
        ]))  # fmt: skip

    drain = results.get("drain")
    if drain:
        n = None
        for kind, section in drain.items():
            rows = []
            for f in section.get("floor", []) or section.get("mq", []):
                batch, par = f["batch"], f["parallel"]
                n = f["count"]
                mq = drain_rate(results, kind, batch, par)
                floor = drain_rate(results, kind, batch, par, "floor")
                mrow = _best(section.get("mq", []), batch=batch, parallel=par)
                frow = _best(section.get("floor", []), batch=batch, parallel=par)
                rows.append([
                    batch, par, _fmt(mq), _fmt(floor), _fmt(_ratio(mq, floor), 2),
                    ("yes" if mrow["ok"] else "NO") if mrow else "–",
                    "/".join(str(x) for x in mrow["split"]) if mrow else "",
                    f"{_others(mrow)} / {_others(frow)}",
                ])  # fmt: skip
            out.append(
                f"\n### Drain, {LABEL[kind]}: {n:,} messages, no-op Python handler (msg/s)\n"
            )
            out.append(table(
                ["batch", "procs", "mq drain", "floor (same SQL, DELETE each)", "mq / floor",
                 "exactly once", "split", "others' CPU mq / floor"], rows,
            ))  # fmt: skip
            batched = section.get("floor_batch_delete", [])
            grouped = {r["parallel"]: r for r in section.get("group_ack", [])}
            if batched:
                out.append(
                    "\nOne acknowledgement per batch (claim 100 + one `DELETE … IN (…)`; mq's "
                    "opt-in `group_ack`, where a crash re-runs at most the batch): "
                    + ", ".join(
                        f"{r['parallel']} proc floor {r['rate']:,.0f}"
                        + (
                            f" / mq {grouped[r['parallel']]['rate']:,.0f}"
                            f" ({_fmt(_ratio(grouped[r['parallel']]['rate'], r['rate']), 2)}x)"
                            if r["parallel"] in grouped
                            else ""
                        )
                        for r in batched
                    )
                    + " msg/s."
                )
            checks = section.get("exactly_once", [])
            if checks:
                out.append(
                    "\nExactly once with an id-recording handler (4 procs): "
                    + ", ".join(
                        f"batch {c['batch']}: {c['handled']:,}/{c['count']:,} handled, "
                        f"{c['duplicates']} duplicates, {c['missing']} missing"
                        for c in checks
                    )
                    + "."
                )
    ex = results.get("exec")
    if ex:
        for kind, rows in ex.items():
            out.append(
                f"\n### Drain, {LABEL[kind]}: {rows[0]['count']:,} messages, `exec:/bin/true` (msg/s)\n"
            )
            out.append(table(
                ["batch", "1 proc", "2 procs", "4 procs"],
                [[b] + [_fmt(next((r["rate"] for r in rows if r["batch"] == b and r["parallel"] == p), None))
                        for p in (1, 2, 4)] for b in (1, 10, 100)],
            ))  # fmt: skip
    runner = results.get("runner")
    if runner:
        micro = runner.get("micro", {})
        out.append(
            "\n### Handler runner (mq's Drain in-process: PythonRunner child vs handler called inline)\n"
        )
        rows = []
        for kind in ("mysql", "sqlite"):
            for r in runner.get(kind, []):
                rows.append(
                    [
                        LABEL[kind],
                        r["batch"],
                        _fmt(r["runner_rate"]),
                        _fmt(r["inline_rate"]),
                        _fmt(r["ratio"], 2),
                    ]
                )
        out.append(table(["database", "batch", "runner msg/s", "inline msg/s", "ratio"], rows))
        if micro:
            batched = (
                f"; {micro['batch_us']:.1f} µs each when handed over 100 at a time, as the drain "
                "does (the child runs the next while the results come back)"
                if "batch_us" in micro
                else ""
            )
            out.append(
                f"\nWithout a database: {micro['runner_us']:.1f} µs per message through the runner "
                f"one at a time (a pipe round trip to the child){batched}; "
                f"{micro['inline_us']:.1f} µs inline."
            )
    scale = results.get("scale")
    if scale:
        out.append(
            "\n### Scale: claim throughput against the backlog (Backend.claim of 100 + one DELETE per batch)\n"
        )
        rows = []
        plans = []
        for kind, items in scale.items():
            base = items[0]["claim_rate"] if items else None
            drain_base = items[0]["drain_rate"] if items else None
            for s in items:
                rows.append([
                    LABEL[kind], s["scenario"], _fmt(s["claim_rate"]), _fmt(s["ms_per_claim"], 2),
                    _fmt(_ratio(s["claim_rate"], base), 2), _fmt(s["drain_rate"]),
                    _fmt(_ratio(s["drain_rate"], drain_base), 2), _fmt(s["load_seconds"], 1),
                ])  # fmt: skip
                plans.append(
                    f"{LABEL[kind]}, {s['scenario']}:\n"
                    + "\n".join(f"    {p}" for p in s["explain"])
                )
                if s.get("settled"):
                    plans.append(
                        f"{LABEL[kind]}, {s['scenario']}, after VACUUM (ANALYZE) "
                        f"({s['settled']['seconds']:.1f} s):\n"
                        + "\n".join(f"    {p}" for p in s["settled"]["explain"])
                    )
        out.append(table(
            ["database", "table holds", "claimed msg/s", "ms per claim", "claim vs 10k",
             "mq drain msg/s", "drain vs 10k", "load s"],
            rows,
        ))  # fmt: skip
        out.append(
            "\nEXPLAIN of the claim right after the bulk load:\n\n```\n"
            + "\n".join(plans)
            + "\n```"
        )
    mem = results.get("memory")
    if mem:
        out.append("\n### Memory (peak RSS)\n")
        rows = []
        for kind, r in mem.items():
            d, g = r["drain"], r["gigabyte"]
            rows.append([LABEL[kind], f"drain of {d['count']:,} (batch 100)", _fmt(d["peak_rss_mb"], 1),
                         _fmt(d["worker_peak_rss_mb"], 1), f"{d['rate']:,.0f} msg/s"])  # fmt: skip
            rows.append([LABEL[kind], f"enqueue --lines, {g['bytes'] / 1e9:.2f} GB piped", _fmt(g["peak_rss_mb"], 1),
                         "", f"{g['rate']:,.0f} msg/s, {g['mb_per_s']:.0f} MB/s"])  # fmt: skip
        out.append(table(["database", "run", "mq process MB", "handler process MB", "speed"], rows))
    peers = results.get("peers")
    if peers:
        out.append("\n### Peers on the same no-op job (jobs/s; mq for comparison: batch 100)\n")
        rows = []
        for key, label in (("rq", "RQ burst worker (forks per job), Redis"),
                           ("rq_simple", "RQ SimpleWorker burst, Redis"),
                           ("huey", "huey SqliteHuey consumer, -k thread -w N (its default worker type)"),
                           ("huey_process", "huey SqliteHuey consumer, -k process -w N (fastest documented)")):  # fmt: skip
            items = peers.get(key, [])
            if items:
                rows.append(
                    [f"{label}, {items[0]['count']:,} jobs"]
                    + [_fmt(peer_rate(results, key, p)) for p in (1, 2, 4)]
                )
        for kind in ("mysql", "sqlite"):
            if kind in results.get("drain", {}):
                rows.append(
                    [f"mq drain, {LABEL[kind]}"]
                    + [_fmt(drain_rate(results, kind, 100, p)) for p in (1, 2, 4)]
                )
        out.append(table(["", "1 proc/worker", "2", "4"], rows))
    pg = results.get("postgres")
    if pg and pg.get("rows"):
        out.append("\n### PostgreSQL: mq, its floors and the PostgreSQL queues (msg/s)\n")
        out.append(postgres_heading(pg) + "\n")
        out.append("\n".join(postgres_table(pg)))
    return "\n".join(out) + "\n"
