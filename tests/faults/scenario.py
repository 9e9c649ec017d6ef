"""One fault scenario, end to end: config, producer, crontab, chaos, gc, final
drains and the check of the history. The test modules choose the faults."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mq_cli
from tests.faults import harness
from tests.faults.harness import Fleet, GcLog, Host, Loop
from tests.faults.history import Analysis, Disruption, check, read

# A live drain heartbeats every stalled_after/3. On 2 cores running a few
# hundred drains (and whatever else shares the machine), a process can go
# unscheduled for seconds: 3 s proved too tight, a healthy drain's claims were
# requeued. 6 s keeps the heartbeat promise testable and recovery quick.
STALLED_AFTER = 6.0
BATCH = 10
DEFAULTS = {
    "handler": "tests.faults.jobs:chaos",
    "max_errors": 50,  # kills and stalls alone never make a message `failed`
    "retry_delay": "100ms",
    "retry_delay_max": "1s",
    "stalled_after": f"{STALLED_AFTER:g}s",
    "batch_size": BATCH,
    "concurrency": 4,
    "timeout": "1m",
}
POISON = {
    "handler": "tests.faults.jobs:poison",
    "max_errors": 3,
    "retry_delay": 0,
    "concurrency": 1,
}


@dataclass
class Scenario:
    """A history-recording run against one database."""

    tmp: Path
    url: str  # the database, as the producer, gc and final drains reach it
    sql: Callable[..., list[tuple]]
    queues: dict[str, dict]
    base_env: dict[str, str]
    history: Path = field(init=False)
    config: Path = field(init=False)
    enqueued: dict[str, str] = field(default_factory=dict)  # key -> queue
    keys: dict[int, str] = field(default_factory=dict)  # id -> key
    gc_log: GcLog = field(default_factory=GcLog)
    extra_disruptions: list[Disruption] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history = self.tmp / "history.jsonl"
        self.config = self.host_config("main")
        self.env = self.host_env(self.config)
        self.hosts = [Host("main", self.env)]
        self.fleet = Fleet(self.tmp, self.hosts)
        self.lock = threading.Lock()
        self.counter = itertools.count()

    def host_config(self, host: str) -> Path:
        """A config of its own per host: its own lock_dir, as on separate machines."""
        return harness.write_config(
            self.tmp / f"{host}.yaml", self.tmp / f"locks-{host}", self.queues, **DEFAULTS
        )

    def host_env(self, config: Path, **extra: str) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(MQ_CONFIG=str(config), MQ_FAULT_HISTORY=str(self.history), **extra)
        return env

    def add_host(self, name: str, url: str, prefix: Sequence[str] = ()) -> Host:
        host = Host(name, self.host_env(self.host_config(name), MQ_DATABASE_URL=url), tuple(prefix))
        self.hosts.append(host)
        self.fleet.hosts[name] = host
        return host

    # -- producing ---------------------------------------------------------------------

    def enqueue(self, queue: str, count: int, **payload: object) -> None:
        """``count`` messages with keys of their own, through the Python API."""
        with self.lock:
            keys = [f"{queue}-{next(self.counter)}" for _ in range(count)]
        with mq_cli.connect(config=str(self.config), database=self.url) as mq:
            ids = mq.enqueue_many(queue, [{"k": k, **payload} for k in keys])
        with self.lock:
            for i, k in zip(ids, keys, strict=True):
                assert i is not None
                self.keys[i] = k
                self.enqueued[k] = queue

    def producer(self, plan: Sequence[tuple[str, int, dict]], every: float) -> Loop:
        """A thread enqueuing ``plan`` [(queue, count, payload)], one item per step."""
        items = iter(plan)

        def step() -> None:
            item = next(items, None)
            if item is None:
                loop.stopped.set()
                return
            queue, count, payload = item
            self.enqueue(queue, count, **payload)

        loop = Loop("producer", step, lambda: every)
        return loop

    # -- operating ---------------------------------------------------------------------

    def gc(self, allow_exit_3: bool = False) -> None:
        harness.gc_stalled_requeue(self.env, self.tmp, self.gc_log, allow_exit_3=allow_exit_3)

    def gc_loop(self, every: float = 4.0, allow_exit_3: bool = False) -> Loop:
        return Loop("gc", lambda: self.gc(allow_exit_3), lambda: every)

    def finish(self, timeout: float = 120) -> dict:
        """After the faults: wait for the drains, let killed drains' claims go stalled,
        gc, drain to the end. Returns what is left (nothing, when all is well)."""
        stuck = self.fleet.wait(45)
        for d in stuck:
            self.fleet.kill(d)
            self.extra_disruptions.append(Disruption(d.pid, time.time(), "stuck, killed"))
        self.fleet.wait(10)
        time.sleep(STALLED_AFTER + 0.5)
        return harness.drain_to_the_end(
            self.fleet, list(self.queues), self.sql, self.gc, timeout=timeout
        )

    def analyse(self, disruptions: Sequence[Disruption] = ()) -> Analysis:
        final = harness.final_state(self.sql)
        return check(
            read(self.history),
            enqueued=self.enqueued,
            final=final,
            max_errors={
                q: int(s.get("max_errors", DEFAULTS["max_errors"])) for q, s in self.queues.items()
            },
            disruptions=[*self.fleet.disruptions(), *self.extra_disruptions, *disruptions],
            requeued=self.gc_log.by_key(self.keys),
            batch_size=BATCH,
        )

    def figures(self, analysis: Analysis) -> str:
        codes = self.fleet.exit_codes()
        return (
            f"{analysis.figures()} drains_started={len(self.fleet.drains)} "
            f"kills={len(self.fleet.killed())} exit_codes={dict(sorted(codes.items()))} "
            f"gc_runs={self.gc_log.runs} gc_requeued={sum(self.gc_log.requeued.values())}"
        )
