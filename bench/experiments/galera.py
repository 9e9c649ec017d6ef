"""Drain throughput on a private 3-node Galera cluster: two deployments.

    .venv/bin/python bench/experiments/galera.py [--messages 10000] [--drains 6] [--rounds 2]

Starts a cluster of its own (tests/servers.py: free ports, own datadirs,
stopped at the end; needs root, galera-4 and rsync), enqueues N messages on
node 1, then drains them with a no-op handler in two layouts:

- ``one writer``: every drain connects to node 1 (what hosting guides advise);
- ``spread``: the drains are split over the three nodes.

For each it prints msgs/s (first drain start to last drain exit), how many
certification failures the cluster counted, and that every message ran once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))

from tests.servers import GaleraCluster, unavailable  # noqa: E402

HANDLER = """
import os
from mq_cli.runners.handlers import current_message

def run(payload):
    with open(os.environ["RAN"], "a") as out:
        out.write(f"{current_message().id}\\n")
"""


def cert_failures(cluster: GaleraCluster) -> int:
    return sum(
        int(node.sql("SHOW STATUS LIKE 'wsrep_local_cert_failures'")[0][1])
        for node in cluster.nodes
    )


def one_layout(cluster: GaleraCluster, work: Path, name: str, nodes: list[int], n: int) -> dict:
    database = f"bench_{name.replace(' ', '_')}"
    cluster.nodes[0].sql(f"DROP DATABASE IF EXISTS {database}")
    cluster.nodes[0].sql(f"CREATE DATABASE {database}")
    urls = cluster.urls(database)
    ran = work / f"ran-{database}.txt"
    ran.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{work}:{ROOT}", RAN=str(ran), MQ_CONFIG="")
    env.pop("MQ_CONFIG")
    mq = [sys.executable, "-m", "mq_cli"]
    config = work / "mq.yaml"
    config.write_text(
        f"lock_dir: {work}/locks\nqueues:\n  b:\n    handler: mqgalera:run\n"
        "    batch_size: 20\n    concurrency: 8\n"
    )
    env["MQ_CONFIG"] = str(config)
    subprocess.run([*mq, "-d", urls[0], "init"], env=env, check=True, capture_output=True)
    lines = "".join(f'{{"n": {i}}}\n' for i in range(n)).encode()
    subprocess.run(
        [*mq, "-d", urls[0], "enqueue", "-q", "b", "--lines", "--silent"],
        input=lines, env=env, check=True,
    )  # fmt: skip
    before = cert_failures(cluster)
    started = time.monotonic()
    procs = [
        subprocess.Popen([*mq, "-d", urls[i], "drain", "-q", "b"], env=env, stderr=subprocess.PIPE)
        for i in nodes
    ]
    errors = [p.communicate()[1].decode() for p in procs]
    seconds = time.monotonic() - started
    ids = ran.read_text().split() if ran.exists() else []
    # the database name is made here from a fixed word and a number, never input
    left = cluster.nodes[0].sql(f"SELECT COUNT(*) FROM {database}.mq_messages")[0][0]  # noqa: S608
    cluster.nodes[0].sql(f"DROP DATABASE {database}")
    return {
        "layout": name,
        "msg_s": n / seconds,
        "cert_failures": cert_failures(cluster) - before,
        "ran": len(ids),
        "twice": len(ids) - len(set(ids)),
        "left": left,
        "exit_codes": sorted(p.returncode for p in procs),
        "stderr": [e.strip()[-200:] for e in errors if e.strip()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--drains", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    reason = unavailable(galera=True)
    if reason:
        sys.exit(f"bench/experiments/galera.py: {reason}")
    work = Path(tempfile.mkdtemp(prefix="mq-bench-galera-"))
    (work / "mqgalera.py").write_text(HANDLER)
    cluster = GaleraCluster()
    try:
        layouts = {
            "one writer": [0] * args.drains,
            "spread": [i % 3 for i in range(args.drains)],
        }
        print(f"{args.messages} messages, {args.drains} drains, batch 20, no-op handler")
        print("| layout | msg/s | certification failures | ran | ran twice | left | exits |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for round_ in range(args.rounds):
            for name, nodes in layouts.items():
                r = one_layout(cluster, work, f"{name} {round_}", nodes, args.messages)
                print(
                    f"| {name} | {r['msg_s']:,.0f} | {r['cert_failures']} | {r['ran']} | "
                    f"{r['twice']} | {r['left']} | {r['exit_codes']} |",
                    flush=True,
                )
                for line in r["stderr"]:
                    print(f"    stderr: {line}")
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
