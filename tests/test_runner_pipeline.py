"""The Python runner sends messages ahead of the running one (pyrunner.WINDOW).

What must hold however far ahead it sends: every job is reported exactly
once; a job that was sent but not started when the caller changed its mind
(a stop, a message no longer held, the drain's deadline) never runs; a
timeout or a dead worker costs the running job only, the ones behind it run
in a fresh worker. Real worker processes; the handler (tests.handlers:step)
records what actually ran.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mq_cli.runners import make_runner
from mq_cli.runners.handlers import NOT_STARTED, MessageInfo, Outcome
from mq_cli.runners.python import WINDOW, WINDOW_BYTES

CREATED = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def nothing() -> None:
    pass


def always(index: int) -> bool:
    return True


@pytest.fixture
def runner():
    made = make_runner("tests.handlers:step", "json")
    made.start()
    yield made
    made.close()


def jobs(out: Path, *steps: dict) -> list[tuple[bytes, MessageInfo]]:
    return [
        (
            json.dumps({"file": str(out), "n": n, **extra}).encode(),
            MessageInfo(id=100 + n, queue="q", error_count=0, created_at=CREATED),
        )
        for n, extra in enumerate(steps)
    ]


def ran(out: Path) -> list[int]:
    if not out.exists():
        return []
    return [json.loads(line)["n"] for line in out.read_text().splitlines()]


def pids(out: Path) -> list[int]:
    return [json.loads(line)["pid"] for line in out.read_text().splitlines()]


def test_a_full_batch_runs_in_order_in_one_worker_each_reported_once(runner, tmp_path):
    out = tmp_path / "ran"
    count = WINDOW * 3 + 5
    results = list(runner.run_many(jobs(out, *[{}] * count), always, 10, nothing, 1.0))
    assert [index for index, _ in results] == list(range(count))
    assert all(outcome.ok and outcome.seconds is not None for _, outcome in results)
    assert ran(out) == list(range(count))
    assert set(pids(out)) == {runner.pid}


def test_a_timeout_costs_the_running_job_only(runner, tmp_path):
    out = tmp_path / "ran"
    first = runner.pid
    results = dict(runner.run_many(jobs(out, {}, {"sleep": 30}, {}, {}), always, 1, nothing, 0.2))
    assert results[1] == Outcome(ok=False, error="timed out after 1s", timed_out=True)
    assert results[0].ok and results[2].ok and results[3].ok
    assert ran(out) == [0, 1, 2, 3]  # the two behind it were sent ahead, and still ran once
    assert pids(out)[:2] == [first, first] and pids(out)[2] != first


def test_starting_a_fresh_worker_is_not_the_next_jobs_time(tmp_path):
    # Each start imports for 2 s, more than the 1 s timeout: only the job that
    # hangs times out, not the one that waits for the fresh worker behind it.
    out = tmp_path / "ran"
    with make_runner("tests.slow_import:step", "json") as slow:
        results = dict(slow.run_many(jobs(out, {"sleep": 30}, {}), always, 1, nothing, 0.2))
    assert results[0] == Outcome(ok=False, error="timed out after 1s", timed_out=True)
    assert results[1].ok
    assert ran(out) == [0, 1]


def test_a_worker_dying_costs_the_running_job_only(runner, tmp_path):
    out = tmp_path / "ran"
    results = dict(runner.run_many(jobs(out, {}, {"exit": 7}, {}), always, 10, nothing, 1.0))
    assert results[1] == Outcome(ok=False, error="handler process died: exit code 7")
    assert results[0].ok and results[2].ok
    assert ran(out) == [0, 1, 2]


def test_failures_with_long_errors_do_not_jam_the_pipes(runner, tmp_path):
    # Replies of 4,000 characters each, more than a pipe holds, while messages
    # are still being sent: neither side may block on the other.
    out = tmp_path / "ran"
    many = [{"fail": "x", "repeat": 100_000}] * (WINDOW * 2)
    results = list(runner.run_many(jobs(out, *many), always, 10, nothing, 1.0))
    assert len(results) == WINDOW * 2
    assert all(not o.ok and o.error.endswith("x" * 100) for _, o in results)


def test_payloads_larger_than_the_window_and_the_pipe(runner, tmp_path):
    out = tmp_path / "ran"
    big = {"pad": "y" * (WINDOW_BYTES + 123)}
    results = list(runner.run_many(jobs(out, big, big, {}, big), always, 30, nothing, 1.0))
    assert [(i, o.ok) for i, o in results] == [(0, True), (1, True), (2, True), (3, True)]
    assert ran(out) == [0, 1, 2, 3]


def test_stop_lets_the_running_job_finish_and_starts_no_other(runner, tmp_path):
    out = tmp_path / "ran"

    def stop_soon() -> None:
        runner.stop()  # what the drain's first SIGTERM does, from a tick here

    work = jobs(out, {"sleep": 0.6}, {}, {}, {})
    results = dict(runner.run_many(work, always, 10, stop_soon, 0.1))
    assert results == {0: Outcome(ok=True), 1: NOT_STARTED, 2: NOT_STARTED, 3: NOT_STARTED}
    assert ran(out) == [0]
    # and the runner is usable again afterwards
    assert dict(runner.run_many(jobs(out, {}), always, 10, nothing, 1.0)) == {0: Outcome(ok=True)}


def test_a_job_no_longer_admitted_is_taken_back_before_it_starts(runner, tmp_path):
    # The drain's heartbeat (a tick) finds message 2 gone while message 0 runs;
    # 1 and 2 were already sent ahead. 2 must not run; 1 and 3 must.
    out = tmp_path / "ran"
    gone: set[int] = set()

    def heartbeat() -> None:
        gone.add(2)

    work = jobs(out, {"sleep": 0.6}, {}, {}, {})
    results = dict(runner.run_many(work, lambda i: i not in gone, 10, heartbeat, 0.1))
    assert results[2] == NOT_STARTED
    assert results[0].ok and results[1].ok and results[3].ok
    assert sorted(ran(out)) == [0, 1, 3]


def test_nothing_starts_after_the_deadline_even_if_sent_ahead(runner, tmp_path):
    out = tmp_path / "ran"
    not_after = time.monotonic() + 0.5
    work = jobs(out, {"sleep": 1.0}, {}, {})
    results = dict(runner.run_many(work, always, 10, nothing, 5.0, lambda: not_after))
    assert results == {0: Outcome(ok=True), 1: NOT_STARTED, 2: NOT_STARTED}
    assert ran(out) == [0]


def test_leaving_early_kills_the_running_handler(runner, tmp_path):
    # The drain leaves the loop (the database is gone for good) while the next
    # message, sent ahead, runs: that handler must not outlive the loop, since
    # its message is about to be given back.
    out = tmp_path / "ran"
    results = runner.run_many(jobs(out, {}, {"sleep": 30}), always, 60, nothing, 1.0)
    assert next(results)[1].ok
    deadline = time.monotonic() + 60
    while ran(out) != [0, 1]:  # message 1 has started (it records its n first)
        assert time.monotonic() < deadline, ran(out)
        time.sleep(0.01)
    worker = runner.pid
    started = time.monotonic()
    results.close()
    assert time.monotonic() - started < 15  # killed, not waited for (30 s)
    assert runner.pid is None and worker is not None
    assert ran(out) == [0, 1]


@pytest.mark.parametrize("ready_before", [False, True], ids=["first-child", "fresh-child"])
def test_a_child_killed_while_its_handler_loads_started_nothing(tmp_path, ready_before):
    # The drain kills its handler child (a second signal, a lost session) while
    # the handler's module is still importing. No message started: none is a
    # failure, and a handler that loads fine is not "could not be loaded".
    out = tmp_path / "ran"
    with make_runner("tests.slow_import:step", "json") as slow:
        if ready_before:  # a child got ready once, then exited; the next one is killed loading
            assert 0 in dict(slow.run_many(jobs(out, {"exit": 0}), always, 30, nothing, 0.2))
        kills = []

        def kill_once() -> None:
            if not kills:
                kills.append(slow.pid)
                slow.kill()

        results = dict(slow.run_many(jobs(out, {}, {}), always, 30, kill_once, 0.2))
    assert results[0] == NOT_STARTED
    assert results[1].ok  # a fresh child for the next, as after any death
    assert kills and ran(out) == [0, 1][not ready_before :]
