"""Drain throughput through PgBouncer (transaction and session mode) against direct.

    .venv/bin/python bench/experiments/pooler.py [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                     [--messages 5000] [--rounds 2] [--procs 1,4]

The workload and the timing of bench/postgres.py's "mq" row (its Bench.mq: `mq
enqueue --lines` of N 199-byte messages, then P `mq drain --batch-size 100`
started together, N / wall time until the last exits, interpreter start
included), on four routes to the same server:

- direct, ``pooler: none``: psycopg prepares a statement on the server after
  it has run 5 times (what mq did before poolers were supported);
- direct, ``pooler: auto``: no statement is prepared on the server (mq's
  default now): the cost of being safe behind an undetected pooler;
- PgBouncer 1.18 in transaction mode (detected by ``auto``: heartbeats alone,
  no LISTEN) and in session mode (``?pooler=session``), each a private one
  (tests/pooler.py) in front of the same server, default_pool_size 8.

Best of --rounds interleaved rounds; the load average before and after is
printed beside the table (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from postgres import Bench  # noqa: E402

from tests.pooler import PrivatePgbouncer  # noqa: E402


class RouteBench(Bench):
    """Bench.mq with mq's URL going through ``route`` (the admin stays direct)."""

    route = ""  # "host:port" of a pooler, or "" for direct
    query = ""

    def fresh(self, database: str) -> str:
        url = super().fresh(database)
        if self.route:
            url = url.replace(url.split("@", 1)[1].split("/", 1)[0], self.route, 1)
        return url + self.query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--procs", default="1,4")
    args = parser.parse_args()
    procs_list = [int(p) for p in args.procs.split(",")]
    host_port = args.url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    bouncers = {
        mode: PrivatePgbouncer(mode, (host, int(port))) for mode in ("transaction", "session")
    }
    routes = {
        "direct, pooler: none (prepared statements)": ("", "?pooler=none"),
        "direct, pooler: auto (nothing prepared)": ("", ""),
        "PgBouncer, transaction mode (auto: detected)": (f"127.0.0.1:{bouncers['transaction'].port}", ""),
        "PgBouncer, session mode (pooler: session)": (f"127.0.0.1:{bouncers['session'].port}", "?pooler=session"),
    }  # fmt: skip
    bench = RouteBench(args.url, Path("."), args.messages)
    best: dict[tuple[str, int], float] = {}
    load_before, started = os.getloadavg(), time.time()
    try:
        for round_ in range(1, args.rounds + 1):
            for procs in procs_list:
                for name, (route, query) in routes.items():
                    bench.route, bench.query = route, query
                    _, out = bench.mq(procs)
                    best[name, procs] = max(best.get((name, procs), 0.0), out)
                    print(f"round {round_}, {name}, {procs} proc(s): drain {out:,.0f} msg/s, "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)  # fmt: skip
        bench.drop("mqbench_pg")
    finally:
        for bouncer in bouncers.values():
            bouncer.close()
    load_after = os.getloadavg()
    print(f"{args.messages:,} messages, no-op handler, batch 100; best of {args.rounds} "
          f"interleaved rounds; {time.time() - started:.0f} s; {os.cpu_count()} CPUs; load average "
          f"{' / '.join(f'{x:.1f}' for x in load_before)} before, "
          f"{' / '.join(f'{x:.1f}' for x in load_after)} after\n")  # fmt: skip
    heads = " | ".join(f"drain, {p} proc{'s' if p > 1 else ''}" for p in procs_list)
    print(f"| route | {heads} |\n| --- |" + " --- |" * len(procs_list))
    direct = {p: best[next(iter(routes)), p] for p in procs_list}
    for name in routes:
        cells = " | ".join(
            f"{best[name, p]:,.0f} ({best[name, p] / direct[p]:.2f}x)" for p in procs_list
        )
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
