"""The seconds the tests no longer assert (issue 34), measured against their targets.

The suite checks mechanisms (the order of events, that a lock was free, that a
wake-up and not a poll started a message) with deadlines that only a hang
reaches, so that it stays green on a busy machine. How fast those mechanisms
are is measured here: the same tests, run one at a time (``pytest -n 0 -s``),
print a ``FIGURES`` line each; this reads those lines and sets each figure
beside its target, the margin the test used to assert.

Not part of `bench/run` (like limits.py): ``.venv/bin/python bench/timings.py
[--rounds N] [--only NAME]`` with the project's virtualenv (pytest, the servers
of tests/run.sh; the read-only, stopped-drain and failover tests start private
servers, and are skipped, without a figure, where they cannot). Prints a
Markdown table with `uptime`'s load before and after: the figures are the
machine's as much as mq's, so compare runs at a like load.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Figure:
    name: str
    what: str
    #: the tests that print it (pytest node ids, or a file and -k)
    tests: list[str]
    #: a FIGURES line's label (group "label", or the whole match) and its value(s)
    pattern: str
    unit: str
    target: str
    met: Callable[[float], bool]


def ms_list(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(-?[\d.]+) ms", text)]


FIGURES = [
    Figure(
        "rate_limit",
        "200 messages at rate_limit 20/s by 4 drains on MariaDB: seconds to drain",
        [
            "tests/test_ratelimit.py::test_20_per_second_over_200_messages_by_4_drains_holds_the_rate_and_shares_it"
        ],
        r"rate_limit 20/s, 200 messages, 4 drains: (?P<value>[\d.]+) s",
        "s",
        "9.0-11.5 s",
        lambda v: 9.0 <= v <= 11.5,
    ),
    Figure(
        "stalled",
        "a killed drain's messages listed stalled (its lock free), after the kill",
        [
            "tests/test_liveness.py::test_gc_lists_a_killed_drains_messages_at_once_and_requeues_them_after_the_grace"
        ],
        r"liveness \((?P<label>\w+)\): listed stalled (?P<value>[\d.]+) s",
        "s",
        "<= 2 s",
        lambda v: v <= 2.0,
    ),
    Figure(
        "rerun",
        "a killed drain's messages run again by a waiting requeue_stalled drain, after the kill",
        [
            "tests/test_liveness.py::test_a_waiting_drain_runs_a_killed_drains_messages_again_long_before_stalled_after"
        ],
        r"liveness \((?P<label>\w+)\): ran again after (?P<value>[\d.]+) s",
        "s",
        "<= 5 s",
        lambda v: v <= 5.0,
    ),
    Figure(
        "fence",
        "a drain cut off from its server: its handler stopped, after the cut",
        [
            "tests/test_liveness.py::test_a_drain_cut_off_from_its_database_stops_its_handler_before_the_message_runs_again"
        ],
        r"fence \((?P<label>\w+)\): the handler stopped (?P<value>[\d.]+) s",
        "s",
        "<= FENCE + 1 = 3 s",
        lambda v: v <= 3.0,
    ),
    Figure(
        "guard",
        "heartbeats alone, writes stalled: the handler stopped, after the stall (stalled_after 2 s)",
        [
            "tests/test_liveness.py::test_a_heartbeat_only_drain_whose_writes_stalled_past_stalled_after_stops_with_exit_3"
        ],
        r"guard: the handler stopped (?P<value>-?[\d.]+) s",
        "s",
        "< stalled_after = 2 s",
        lambda v: v < 2.0,
    ),
    Figure(
        "stopped",
        "a drain stopped (SIGSTOP, Ctrl-Z): its handler ran on, after the stop",
        ["tests/faults/test_stopped_drain.py"],
        r"stopped drain \((?P<label>[^)]+)\): the handler ran on (?P<value>-?[\d.]+) s",
        "s",
        "<= FENCE + 1 = 3 s",
        lambda v: v <= 3.0,
    ),
    Figure(
        "read_only",
        "a server that stays read-only: the drain's exit 3, after the flip",
        ["tests/faults/test_read_only.py", "-k", "stays_read_only"],
        r"read-only for good (?P<label>\w+): exit after (?P<value>[\d.]+) s",
        "s",
        "<= 5 s (READ_ONLY_FOR 3.5 s)",
        lambda v: v <= 5.0,
    ),
    Figure(
        "wakeup",
        "a waiting drain woken by an enqueue: the slowest of 3 starts, from the commit "
        "(the CLI's printed id, the API's return, the application's commit)",
        ["tests/test_wakeup.py", "-k", "wakes"],
        r"wake-up \((?P<label>[^)]+)\): [^\d-]*(?P<values>(?:-?[\d.]+ ms(?:, )?)+)",
        "ms",
        "<= 300 ms each (bench/experiments/latency.py: p50 <= 5, p99 <= 50)",
        lambda v: v <= 300,
    ),
    Figure(
        "group_ack",
        "group_ack: the first success's DELETE while a slow handler runs, after its run",
        ["tests/test_drain.py::test_group_ack_does_not_hold_a_success_back_behind_a_slow_handler"],
        r"group_ack \((?P<label>\w+)\): the first success waited (?P<value>[\d.]+) s",
        "s",
        "< 2 s (ack_delay 50 ms)",
        lambda v: v < 2.0,
    ),
    Figure(
        "handover",
        "cron's next run of a line (--max-seconds 60): holding the slot, after the "
        "ending run exited",
        ["tests/test_cron_handover.py", "-k", "takes_over"],
        r"handover \((?P<label>\w+)\): the next run held the slot (?P<value>[\d.]+) ms",
        "ms",
        "<= 100 ms (slots.HANDOVER_POLL 20 ms)",
        lambda v: v <= 100,
    ),
    Figure(
        "schema_check",
        "the schema check every command's connection pays",
        ["tests/test_schema.py::test_the_check_is_once_per_connection_and_cheap"],
        r"FIGURES (?P<label>\w+): schema check (?P<value>[\d.]+) ms",
        "ms",
        "< 50 ms",
        lambda v: v < 50,
    ),
    Figure(
        "failover",
        "PostgreSQL failover: the first acknowledgement on the new primary, after its promotion",
        ["tests/faults/test_failover.py"],
        r"first_ack_after_promotion=(?P<value>[\d.]+)s",
        "s",
        "<= 5 s",
        lambda v: v <= 5.0,
    ),
]


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run(figure: Figure) -> tuple[list[tuple[str, float]], str]:
    """The figure's (label, value) pairs from one run of its tests, and pytest's summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-s", "-q", "-p", "no:cacheprovider",
         *figure.tests],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    found = []
    for line in proc.stdout.splitlines():
        if "FIGURES" not in line:
            continue
        for match in re.finditer(figure.pattern, line):
            groups = match.groupdict()
            label = groups.get("label") or ""
            if groups.get("values"):
                found.append((label, max(ms_list(groups["values"]))))
            else:
                found.append((label, float(groups["value"])))
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return found, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each test (default 1)")
    parser.add_argument("--only", action="append", choices=[f.name for f in FIGURES])
    args = parser.parse_args()
    chosen = [f for f in FIGURES if not args.only or f.name in args.only]
    print(f"load before: {load()}\n")
    print("| figure | what | measured | target | met |")
    print("| --- | --- | --- | --- | --- |")
    missed = 0
    for figure in chosen:
        values: list[tuple[str, float]] = []
        summaries = []
        for _ in range(args.rounds):
            found, summary = run(figure)
            values += found
            summaries.append(summary)
        if not values:
            print(f"| {figure.name} | {figure.what} | none: {'; '.join(summaries)} "
                  f"| {figure.target} | - |")  # fmt: skip
            continue
        shown = ", ".join(
            f"{label + ' ' if label else ''}{v:g} {figure.unit}" for label, v in values
        )
        met = all(figure.met(v) for _, v in values)
        missed += not met
        print(f"| {figure.name} | {figure.what} | {shown} | {figure.target} | "
              f"{'yes' if met else 'no'} |")  # fmt: skip
    print(f"\nload after: {load()}")
    print(f"{missed} figure(s) missed their target" if missed else "every figure met its target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
