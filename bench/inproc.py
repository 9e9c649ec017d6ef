"""Measurements that need mq's Python API in-process (each run as its own process by the bench).

    python inproc.py enqueue-many CONFIG --count N        # MQ.enqueue_many, the producers' API
    python inproc.py drain CONFIG --mode runner|inline    # mq's Drain, handler in a child or inline
    python inproc.py runner-micro --count N               # PythonRunner round trip vs a plain call
    python inproc.py claim-loop CONFIG --count N          # Backend.claim + one DELETE per batch
    python inproc.py child-loop --count N                 # the handler's child's loop alone

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

QUEUE = "bench"


def enqueue_many(config: str, count: int, size: int) -> dict[str, Any]:
    import mq_cli

    pad = "x" * (size - 20)
    values = [{"n": n, "pad": pad} for n in range(count)]
    with mq_cli.connect(config=config) as mq:
        _ = mq.backend  # connect before the clock starts: the app holds a connection already
        started = time.perf_counter()
        ids = mq.enqueue_many(QUEUE, values)
        seconds = time.perf_counter() - started
    return {"stored": len(ids), "seconds": seconds, "payload_bytes": len(json.dumps(values[0]))}


def _one_at_a_time() -> type:
    # mq's own base gives run_many (what the drain calls) from run; older snapshots
    # of mq_cli (--code REV) have no such class and call run directly.
    try:
        from mq_cli.runners.runner import OneAtATime
    except ImportError:
        try:
            from mq_cli.runners.handlers import OneAtATime  # before the split (issue 38)
        except ImportError:
            return object
    return OneAtATime


class InlineRunner(_one_at_a_time()):  # type: ignore[misc]
    """Calls the handler in the drain's own process: no child, no pipe, no timeout."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self.func: Any = None

    def start(self) -> None:
        from mq_cli.runners.paths import load

        self.func = load(self.path)

    def run(self, payload: bytes, info: Any, timeout: Any, tick: Any, tick_every: Any) -> Any:
        from mq_cli.core.payloads import decode
        from mq_cli.runners.handlers import Outcome, _set_current

        if self.func is None:  # the drain no longer calls start() (mq's runner starts lazily)
            self.start()
        _set_current(info)
        try:
            result = self.func(decode(payload, self.fmt))
        except Exception as exc:
            return Outcome(ok=False, error=repr(exc))
        finally:
            _set_current(None)
        return Outcome(ok=result is not False)

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass


def drain(config: str, mode: str, batch: int, handler: str) -> dict[str, Any]:
    from mq_cli.api import MQ
    from mq_cli.core.config import load_config
    from mq_cli.drain.report import DrainOptions
    from mq_cli.runners import handlers

    if mode == "inline":
        handlers.make_runner = InlineRunner  # type: ignore[assignment]
    with MQ(load_config(config)) as mq:
        _ = mq.backend
        report = mq.drain(DrainOptions(queues=[QUEUE], handler=handler, batch_size=batch))
    return report.to_json()


def runner_micro(count: int, handler: str) -> dict[str, Any]:
    from mq_cli.runners.handlers import MessageInfo
    from mq_cli.runners.python import PythonRunner

    info = MessageInfo(1, QUEUE, 0, datetime.now(timezone.utc))
    body = b'{"n":1,"pad":"' + b"x" * 184 + b'"}'
    result: dict[str, Any] = {"count": count}
    runners: list[tuple[str, Any]] = [("inline", InlineRunner(handler, "json"))]
    runners.append(("runner", PythonRunner(handler, "json")))
    for name, runner in runners:
        runner.start()
        try:
            started = time.perf_counter()
            for _ in range(count):
                outcome = runner.run(body, info, 600.0, lambda: None, 5.0)
                assert outcome.ok, outcome
            result[f"{name}_us"] = (time.perf_counter() - started) / count * 1e6
            if name == "runner" and hasattr(runner, "run_many"):
                # What a drain does: a batch of 100 handed over, results streamed back.
                jobs = [(body, info)] * 100
                started, cpu = time.perf_counter(), time.process_time()
                for _ in range(count // 100):
                    for _, outcome in runner.run_many(jobs, lambda i: True, 600.0, _nop, 5.0):
                        assert outcome.ok, outcome
                done = count // 100 * 100
                result["batch_us"] = (time.perf_counter() - started) / done * 1e6
                # This process's share: what the drain's side of the runner costs.
                result["batch_cpu_us"] = (time.process_time() - cpu) / done * 1e6
        finally:
            runner.close()
    return result


def _nop() -> None:
    pass


def claim_loop(config: str, batch: int, count: int, max_seconds: float) -> dict[str, Any]:
    from mq_cli.backends import open_backend
    from mq_cli.core.config import load_config

    cfg = load_config(config)
    backend = open_backend(cfg.database, cfg.table)
    owner = "bench:claim-loop"
    claimed = claims = 0
    claim_seconds = 0.0
    started = time.perf_counter()
    try:
        while claimed < count and time.perf_counter() - started < max_seconds:
            t = time.perf_counter()
            messages = backend.claim(QUEUE, min(batch, count - claimed), owner)
            claim_seconds += time.perf_counter() - t
            claims += 1
            if not messages:
                break
            claimed += len(messages)
            backend.ack_success_many([m.id for m in messages], owner)
    finally:
        backend.close()
    total = time.perf_counter() - started
    return {
        "claimed": claimed,
        "claims": claims,
        "claim_seconds": claim_seconds,
        "seconds": total,
        "claim_rate": claimed / claim_seconds if claim_seconds else 0.0,
        "loop_rate": claimed / total if total else 0.0,
        "ms_per_claim": claim_seconds / claims * 1000 if claims else 0.0,
    }


def child_loop(count: int, handler: str) -> dict[str, Any]:
    """The handler's child's own loop (runners/child.py ``_serve``) in this process, on
    ``count`` message frames read from a file, its replies written to /dev/null: the
    child's CPU a message, without the drain, the pipe's wake-ups or a second core."""
    import os
    import tempfile

    from mq_cli.runners import child
    from mq_cli.runners.handlers import MessageInfo
    from mq_cli.runners.paths import load

    info = MessageInfo(1, QUEUE, 0, datetime.now(timezone.utc))
    body = b'{"n":1,"pad":"' + b"x" * 184 + b'"}'
    with tempfile.TemporaryFile() as frames, open(os.devnull, "wb") as sink:
        frames.write(b"".join(child.encode_message(n + 1, info, None, body) for n in range(count)))
        frames.flush()
        frames.seek(0)
        take_backs, _ = os.pipe()
        os.set_blocking(take_backs, False)
        function = load(handler)
        cpu, wall = time.process_time(), time.perf_counter()
        child._serve(function, "json", frames.fileno(), sink.fileno(), take_backs)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"count": count, "cpu_us": cpu / count * 1e6, "wall_us": wall / count * 1e6}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = ["enqueue-many", "drain", "runner-micro", "claim-loop", "child-loop"]
    parser.add_argument("mode", choices=modes)
    parser.add_argument("config", nargs="?")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--runner", choices=["runner", "inline"], default="runner")
    parser.add_argument("--handler", default="mqbench_jobs:noop")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.mode == "enqueue-many":
        result = enqueue_many(args.config, args.count, args.size)
    elif args.mode == "drain":
        result = drain(args.config, args.runner, args.batch, args.handler)
    elif args.mode == "runner-micro":
        result = runner_micro(args.count, args.handler)
    elif args.mode == "child-loop":
        result = child_loop(args.count, args.handler)
    else:
        result = claim_loop(args.config, args.batch, args.count, args.max_seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
