"""Machinery of the fault scenarios: a fleet of real drain processes, a
simulated crontab, a chaos monkey, gc and final drains,
a TCP forwarder and Linux network namespaces as "hosts".

Everything here starts processes the tests own and reaps every one of them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.history import Disruption, Final, final_rows


def wait_for(predicate: Callable[[], object], timeout: float, every: float = 0.1) -> object:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"condition not reached within {timeout}s")
        time.sleep(every)


# -- configuration ------------------------------------------------------------------


def write_config(path: Path, lock_dir: Path, queues: dict[str, dict], **defaults: object) -> Path:
    """A config file: ``lock_dir``, ``defaults`` and ``queues`` (JSON is YAML)."""
    path.write_text(
        json.dumps({"lock_dir": str(lock_dir), "defaults": defaults, "queues": queues}, indent=1)
    )
    path.chmod(0o600)
    return path


# -- a fleet of drains ---------------------------------------------------------------


@dataclass
class Host:
    """Where drains run: an environment (config, database URL) and a command prefix
    (``ip netns exec NAME`` for a namespace)."""

    name: str
    env: dict[str, str]
    prefix: tuple[str, ...] = ()
    #: mq's global options for every drain of this host (e.g. ``-v``)
    options: tuple[str, ...] = ()


def _seen_dead(pid: int, patience: float = 5.0) -> float:
    """time.time() of the first look at /proc that finds ``pid`` dead (zombie or gone)
    with every thread gone: only then are its files (its pipes) closed. A drain has
    a second thread (its liveness watchdog), and its main thread may show as a
    zombie while that one still exits, holding the pipes open a little longer.

    Looks every 0.2 ms, so the moment is at most that late; not reaped here
    (Popen does that), so the pid cannot be reused meanwhile.
    """
    end = time.monotonic() + patience
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                state = stat.read().rpartition(b")")[2].split()[0]
            threads = len(os.listdir(f"/proc/{pid}/task"))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return time.time()
        if state in (b"Z", b"X") and threads <= 1:
            return time.time()
        time.sleep(0.0002)
    return time.time()


@dataclass
class DrainProc:
    proc: subprocess.Popen
    queue: str
    host: str
    started: float
    err: Path
    ended: float | None = None
    killed_at: float | None = None
    # When it was seen dead (a zombie): its pipes are closed from then on. A
    # drain hands its worker messages ahead, and the worker checks that the
    # drain's pipe is open right before starting one; between the SIGKILL and
    # the kernel tearing the drain down (a few ms on a loaded runner) it may
    # still start one. After this moment it must not.
    gone_at: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""


class Fleet:
    """Real `python -m mq_cli drain` processes, each with its stderr in a file."""

    def __init__(self, workdir: Path, hosts: Sequence[Host]):
        self.workdir = workdir
        self.hosts = {h.name: h for h in hosts}
        self.logs = workdir / "drain-logs"
        self.logs.mkdir(exist_ok=True)
        self.drains: list[DrainProc] = []
        self.lock = threading.Lock()
        self.counter = 0

    def start(
        self, queue: str, *args: str, host: str = "main", options: Sequence[str] = ()
    ) -> DrainProc:
        """``mq OPTIONS drain -q QUEUE ARGS`` (OPTIONS: global ones, such as -v)."""
        h = self.hosts[host]
        with self.lock:
            self.counter += 1
            err = self.logs / f"{host}-{queue}-{self.counter}.err"
        command = [
            *h.prefix,
            sys.executable,
            "-m",
            "mq_cli",
            *h.options,
            *options,
            "drain",
            "-q",
            queue,
        ]
        with open(err, "wb") as err_file:
            proc = subprocess.Popen(
                [*command, *args],
                cwd=self.workdir,
                env=h.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
            )
        drain = DrainProc(proc, queue, host, time.time(), err)
        with self.lock:
            self.drains.append(drain)
        return drain

    def reap(self) -> None:
        with self.lock:
            drains = list(self.drains)
        for d in drains:
            if d.ended is None and d.proc.poll() is not None:
                d.ended = time.time()

    def alive(self, min_age: float = 0.0, host: str | None = None) -> list[DrainProc]:
        self.reap()
        now = time.time()
        with self.lock:
            return [
                d
                for d in self.drains
                if d.ended is None
                and now - d.started >= min_age
                and (host is None or d.host == host)
            ]

    def kill(self, drain: DrainProc) -> None:
        if drain.proc.poll() is None:  # not reaped yet: the pid is still this process
            drain.killed_at = time.time()
            drain.proc.send_signal(signal.SIGKILL)
            drain.gone_at = _seen_dead(drain.pid)

    def wait(self, timeout: float) -> list[DrainProc]:
        """Wait for every drain; those still running after ``timeout`` are returned."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.alive():
            time.sleep(0.1)
        return self.alive()

    def kill_all(self) -> None:
        """Cleanup: SIGKILL whatever still runs and reap everything."""
        for d in self.alive():
            d.proc.kill()
        for d in self.drains:
            d.proc.wait()
            if d.ended is None:
                d.ended = time.time()

    # -- what happened ---------------------------------------------------------------

    def exit_codes(self) -> Counter:
        return Counter(d.proc.returncode for d in self.drains)

    def killed(self) -> list[DrainProc]:
        return [d for d in self.drains if d.proc.returncode == -signal.SIGKILL]

    def disruptions(self) -> list[Disruption]:
        """Drains killed -9 and drains that gave up with exit 3."""
        result = []
        for d in self.drains:
            if d.proc.returncode == -signal.SIGKILL and d.killed_at is not None:
                result.append(Disruption(d.pid, d.gone_at or d.killed_at, "kill -9"))
            elif d.proc.returncode == 3:
                result.append(Disruption(d.pid, d.ended or time.time(), "exit 3"))
        return result

    def problems(self, allowed_codes: frozenset[int] = frozenset({0})) -> list[str]:
        """Drains that ended in an undocumented way or printed what no user should see."""
        found = []
        for d in self.drains:
            code = d.proc.returncode
            text = d.stderr()
            if code not in allowed_codes and not (code == -signal.SIGKILL and d.killed_at):
                found.append(f"drain {d.pid} ({d.host}/{d.queue}) exited {code}: {text[-600:]}")
            for bad in ("Traceback", "internal error", "database is locked"):
                if bad in text:
                    found.append(
                        f"drain {d.pid} ({d.host}/{d.queue}) printed {bad!r}: {text[-600:]}"
                    )
            if code == 3:
                last = text.strip().splitlines()[-1] if text.strip() else ""
                if not last.startswith("mq: "):
                    found.append(f"drain {d.pid} exit 3 without an mq: message: {text[-300:]}")
        return found


class Loop(threading.Thread):
    """A background thread running ``step`` every ``pause()`` seconds until stopped."""

    def __init__(self, name: str, step: Callable[[], None], pause: Callable[[], float]):
        super().__init__(name=name, daemon=True)
        self.step = step
        self.pause = pause
        self.stopped = threading.Event()
        self.paused = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.pause()):
                if not self.paused.is_set():
                    self.step()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def crontab(
    fleet: Fleet,
    jobs: Sequence[tuple[str, str]],
    args: Sequence[str],
    every: float = 0.5,
    rng: random.Random | None = None,
    max_alive: int = 5,
) -> Loop:
    """Start ``drain -q QUEUE ARGS`` for each (host, queue) every ~``every`` seconds.

    Unlike cron, a job is skipped while ``max_alive`` of its drains still run:
    on two cores, interpreters started faster than they can start pile up,
    and nothing would be tested but the scheduler. ``max_alive`` above the
    queue's concurrency still makes drains meet busy slots.
    """
    rng = rng or random.Random()

    def step() -> None:
        alive = Counter((d.host, d.queue) for d in fleet.alive())
        for host, queue in jobs:
            if alive[(host, queue)] < max_alive:
                fleet.start(queue, *args, host=host)

    return Loop("crontab", step, lambda: every * rng.uniform(0.8, 1.2))


def chaos_monkey(
    fleet: Fleet,
    every: tuple[float, float] = (0.5, 2.0),
    rng: random.Random | None = None,
    min_age: float = 0.5,
) -> Loop:
    """kill -9 a random drain that has run at least ``min_age`` s (so it holds messages)."""
    rng = rng or random.Random()

    def step() -> None:
        candidates = fleet.alive(min_age=min_age)
        if candidates:
            fleet.kill(rng.choice(candidates))

    return Loop("chaos", step, lambda: rng.uniform(*every))


# -- operator commands ---------------------------------------------------------------


def mq(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run ``python -m mq_cli ARGS`` to the end (pipes closed, process reaped)."""
    return subprocess.run(
        [sys.executable, "-m", "mq_cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class GcLog:
    """Every `gc --stalled --requeue` run: how often each message id was requeued."""

    runs: int = 0
    failures: list[str] = field(default_factory=list)
    requeued: Counter = field(default_factory=Counter)

    def by_key(self, keys: dict[int, str]) -> Counter:
        return Counter({keys.get(i, f"<id {i}>"): n for i, n in self.requeued.items()})


def gc_stalled_requeue(
    env: dict[str, str], cwd: Path, log: GcLog, *extra: str, allow_exit_3: bool = False
) -> None:
    """`mq gc --stalled --requeue --json`; the requeued ids are counted in ``log``."""
    result = mq(env, cwd, "gc", "--stalled", "--requeue", "--json", *extra)
    log.runs += 1
    if result.returncode == 3 and allow_exit_3:
        return
    if result.returncode != 0:
        log.failures.append(
            f"gc exited {result.returncode}: {result.stderr.decode(errors='replace')[-500:]}"
        )
        return
    try:
        items = json.loads(result.stdout or b"[]")
        for item in items:
            log.requeued[int(item["id"])] += 1
    except (ValueError, KeyError, TypeError) as exc:
        log.failures.append(f"gc --json printed something else ({exc}): {result.stdout[:300]!r}")


def remaining(sql: Callable[..., list[tuple]]) -> Counter:
    """Rows left per status, 'failed' excepted."""
    rows = sql("SELECT status, COUNT(*) FROM mq_messages WHERE status <> 'failed' GROUP BY status")
    return Counter({status: int(n) for status, n in rows})


def drain_to_the_end(
    fleet: Fleet,
    queues: Sequence[str],
    sql: Callable[..., list[tuple]],
    gc: Callable[[], None],
    timeout: float = 90,
    per_queue: int = 4,
) -> Counter:
    """Final drains (no chaos) until nothing is ready, delayed or processing.

    Failed runs wait out their backoff, so this loops: gc, a round of drains
    with --wait, look again. It gives up after ``timeout`` seconds without
    progress (a message nobody can take), not after ``timeout`` in all: on a
    busy machine the final drains of a slow workload may need longer, and a
    deadline on the total failed runs that had lost nothing (seen in CI).
    Returns what is left (empty when done).
    """
    hard_end = time.monotonic() + 8 * timeout
    left = remaining(sql)
    end = time.monotonic() + timeout
    while left and time.monotonic() < min(end, hard_end):
        gc()
        for queue in queues:
            for _ in range(per_queue):
                # Plain drains that end when nothing is ready: a short --max-seconds
                # was spent on a loaded machine before the first claim (no progress,
                # round after round); the loop itself waits out retries' backoff.
                fleet.start(queue, "--max-seconds", "120")
        fleet.wait(60)
        now_left = remaining(sql)
        if sum(now_left.values()) < sum(left.values()):
            end = time.monotonic() + timeout
        left = now_left
    return left


def final_state(sql: Callable[..., list[tuple]]) -> list[Final]:
    return final_rows(sql("SELECT queue, status, error_count, payload FROM mq_messages"))


# -- a TCP forwarder -------------------------------------------------------------------


class Forwarder:
    """Forwards ``listen`` (address, port) to ``target``, like tests/proxy.py but on
    any local address (the main namespace's end of a veth pair)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(listen)
        self.listener.listen(128)
        self.address = self.listener.getsockname()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self.lock:
                if self.closed:
                    client.close()
                    server.close()
                    return
                self.connections += 1
                self.sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        # Both ends go with either direction; closed here, not left to the garbage
        # collector (a ResourceWarning, which the suite treats as an error).
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets = []


# -- Linux network namespaces as hosts -----------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def netns_unavailable() -> str | None:
    """Why this machine cannot make network namespaces with veth pairs, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces with"
    probe = f"mqprobe{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        veth = _ip("link", "add", probe[:12] + "a", "type", "veth", "peer", "name", probe[:12] + "b",
                   check=False)  # fmt: skip
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()}"
        _ip("link", "del", probe[:12] + "a", check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    return None


@dataclass
class NetHost:
    name: str  # namespace name
    outside: str  # veth end in the main namespace
    main_addr: str  # its address (where the forwarder listens)
    ns_addr: str

    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.name)

    def cut(self) -> None:
        _ip("link", "set", self.outside, "down")

    def restore(self) -> None:
        _ip("link", "set", self.outside, "up")


@contextmanager
def namespaces(count: int) -> Iterator[list[NetHost]]:
    """``count`` namespaces, each joined to the main one by a veth pair (a /30 each)."""
    tag = uuid.uuid4().hex[:5]
    net = random.randint(16, 250)
    hosts: list[NetHost] = []
    try:
        for i in range(count):
            name = f"mqf{tag}h{i}"
            outside, inside = f"mqf{tag}{i}o", f"mqf{tag}{i}i"
            main_addr, ns_addr = f"10.{net}.{i}.1", f"10.{net}.{i}.2"
            _ip("netns", "add", name)
            hosts.append(NetHost(name, outside, main_addr, ns_addr))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", name)
            _ip("addr", "add", f"{main_addr}/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", name, "addr", "add", f"{ns_addr}/30", "dev", inside)
            _ip("-n", name, "link", "set", inside, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield hosts
    finally:
        for h in hosts:
            _ip("link", "del", h.outside, check=False)
            _ip("netns", "del", h.name, check=False)
