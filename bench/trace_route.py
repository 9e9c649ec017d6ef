"""Route tracer: which of mq's files one command walks through, in-process, on a fresh SQLite file.

    python bench/trace_route.py                 # every route, a table
    python bench/trace_route.py --json          # the same, one JSON object
    python bench/trace_route.py --route status  # one route; --calls prints each file switch

Each route runs the real CLI (click's CliRunner on ``mq_cli.cli.cli``) against a SQLite
database in a temporary directory, once untraced (imports and first-use caches are not the
route) and then once under a ``sys.setprofile`` hook (Python 3.11 has no ``sys.monitoring``)
that sees every Python call and return of the main thread. Only frames whose file lies in
``mq_cli/`` count; the "current file" is the innermost such frame's file, and a *switch* is a
call or return that changes it. Per route it prints:

- files: distinct mq_cli files with at least one call (and how many of them are in drain/);
- switches: how often the current file changed;
- most re-entered: the files the route switched into most often (an entry is a switch in).

Routes: ``enqueue`` (``mq enqueue -q q PAYLOAD``), ``drain`` (``mq drain`` of one message,
whole run), ``message`` (inside that run: from the call of ``Claimer.claim`` that returned
the message to the return of the ``Acknowledger.record_results`` that deleted it) and
``status`` (``mq status`` with one queue holding one message). The handler runs in its
child process, which the hook does not see; neither does it see the drain's threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from click.testing import CliRunner  # noqa: E402

import mq_cli  # noqa: E402
from mq_cli.cli import cli  # noqa: E402

PACKAGE = str(Path(mq_cli.__file__).resolve().parent) + os.sep
HANDLER = "mq_cli.examples.handlers:word_count"


class Tracer:
    """The profile hook: each call and return of a frame in mq_cli, with the file it leaves
    current (a call: its own; a return: its caller's nearest mq_cli frame)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []  # (event, current file, function)

    @staticmethod
    def _ours(frame: FrameType | None) -> str:
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE):
                return name[len(PACKAGE) :]
            frame = frame.f_back
        return ""

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(PACKAGE):
            return
        here = self._ours(frame if event == "call" else frame.f_back)
        self.events.append((event, here, frame.f_code.co_qualname))


def figures(events: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Files, switches and entries per file of a run of profile events."""
    files = {f for e, f, _ in events if e == "call"}
    current: str | None = None
    entries: Counter[str] = Counter()
    for _, here, _fn in events:
        if here and here != current:
            entries[here] += 1
            current = here
    switches = sum(entries.values()) - 1 if entries else 0
    return {
        "files": len(files),
        "drain_files": sorted(f for f in files if f.startswith("drain/")),
        "switches": switches,
        "most_reentered": entries.most_common(3),
        "file_list": sorted(files),
    }


def traced(run: Callable[[], Any]) -> list[tuple[str, str, str]]:
    tracer = Tracer()
    sys.setprofile(tracer.hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return tracer.events


def message_window(events: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """From the last Claimer.claim call before the first record_results to that one's return."""
    end = next(
        i
        for i, (e, _, fn) in enumerate(events)
        if e == "return" and fn == "Acknowledger.record_results"
    )
    start = max(
        i for i, (e, _, fn) in enumerate(events[:end]) if e == "call" and fn == "Claimer.claim"
    )
    return events[start : end + 1]


def routes(tmp: Path) -> dict[str, list[tuple[str, str, str]]]:
    env = {
        "MQ_CONFIG": None,
        "MQ_DATABASE_URL": f"sqlite:///{tmp / 'mq.db'}",
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "XDG_STATE_HOME": str(tmp / "state"),
        "XDG_RUNTIME_DIR": str(tmp / "run"),
    }
    (tmp / "run").mkdir(mode=0o700)
    runner = CliRunner()

    def mq(*args: str) -> Callable[[], Any]:
        def run() -> Any:
            result = runner.invoke(cli, list(args), env=env, catch_exceptions=False)
            if result.exit_code != 0:
                raise SystemExit(f"mq {' '.join(args)}: exit {result.exit_code}\n{result.output}")
            return result

        return run

    enqueue = mq("enqueue", "-q", "q", '"one two three"')
    drain = mq("drain", "-q", "q", "--handler", HANDLER)
    status = mq("status")
    mq("init")()
    enqueue()  # warm: imports, first-use caches
    out = {"enqueue": traced(enqueue)}
    drain()  # warm: drains both
    enqueue()
    out["drain"] = traced(drain)
    out["message"] = message_window(out["drain"])
    enqueue()
    status()
    out["status"] = traced(status)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", choices=["enqueue", "drain", "message", "status"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--files", action="store_true", help="list each route's files")
    parser.add_argument("--calls", action="store_true", help="print each switch of --route")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mq-trace-") as tmp:
        traces = routes(Path(tmp))
    names = [args.route] if args.route else list(traces)
    report = {name: figures(traces[name]) for name in names}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{'route':9} {'files':>5} {'drain/':>6} {'switches':>8}  most re-entered")
    for name, fig in report.items():
        worst = ", ".join(f"{f} {n}x" for f, n in fig["most_reentered"])
        drain = len(fig["drain_files"])
        print(f"{name:9} {fig['files']:>5} {drain:>6} {fig['switches']:>8}  {worst}")
        if args.files:
            print("          " + " ".join(fig["file_list"]))
    if args.calls and args.route:
        current = None
        for event, here, fn in traces[args.route]:
            if here and here != current:
                print(f"{event:6} {here:34} {fn}")
                current = here


if __name__ == "__main__":
    main()
