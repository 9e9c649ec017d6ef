"""The checker of the fault suite, on synthetic histories: it must flag what a
broken queue would produce, and accept what the contract allows."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tests.faults.history import Disruption, Final, check, event, read, record, runs_of

pytestmark = pytest.mark.slow

MAX = {"q": 50, "poison": 3}
WORKER, DRAIN = 1000, 900  # pids of one drain and its worker


def ev(msg: str, kind: str, t: float, pid: int = WORKER, drain: int = DRAIN) -> dict:
    return {"msg": msg, "pid": pid, "drain": drain, "event": kind, "t": t}


def ok(msg: str, t: float, pid: int = WORKER, drain: int = DRAIN) -> list[dict]:
    return [ev(msg, "start", t, pid, drain), ev(msg, "success", t + 0.01, pid, drain)]


def fail(msg: str, t: float, pid: int = WORKER, drain: int = DRAIN) -> list[dict]:
    return [ev(msg, "start", t, pid, drain), ev(msg, "fail", t + 0.01, pid, drain)]


def run_check(events, enqueued=None, final=(), **kwargs):
    enqueued = enqueued if enqueued is not None else {"a": "q", "b": "q"}
    return check(events, enqueued=enqueued, final=list(final), max_errors=MAX, **kwargs)


def test_a_clean_history_passes():
    events = ok("a", 1.0) + fail("b", 2.0) + ok("b", 3.0, pid=1001, drain=901)
    result = run_check(events)
    assert result.violations == []
    assert (result.successes, result.failures, result.duplicates, result.lost) == (2, 1, 0, 0)


def test_a_lost_message_is_flagged():
    # What an acknowledgement that deletes the wrong row produces: `b` gone, never run.
    result = run_check(ok("a", 1.0))
    assert result.violations == ["lost: b (q) never succeeded and is no longer stored"]
    assert result.lost == 1


def test_a_message_left_behind_is_flagged():
    result = run_check(ok("a", 1.0), final=[Final("b", "q", "ready", 0)])
    assert result.violations == ["left behind: b (q) is still ready"]


def test_an_unexplained_duplicate_is_flagged():
    # What an acknowledgement that never commits produces: the message stays
    # `processing`, gc requeues it, and a healthy drain runs it again.
    events = ok("a", 1.0) + ok("a", 5.0, pid=1001, drain=901) + ok("b", 1.1)
    result = run_check(events)
    assert result.duplicates == 1
    assert [v.split(":")[0] for v in result.violations] == [
        "unexplained duplicate",
        "too many duplicates",  # 1 > 0 disruptions x batch_size
    ]
    assert result.violations[0].startswith("unexplained duplicate: a ran again in drain 901")


def test_a_duplicate_after_a_kill_is_explained():
    # Killed between the handler's success and the acknowledgement.
    events = ok("a", 1.0) + ok("a", 5.0, pid=1001, drain=901) + ok("b", 1.1)
    result = run_check(events, disruptions=[Disruption(DRAIN, 1.02, "kill -9")])
    assert result.violations == []
    assert result.duplicates == 1 and result.duplicate_causes == {"kill -9": 1}


def test_a_kill_before_the_run_explains_nothing():
    events = ok("a", 1.0) + ok("a", 5.0, pid=1001, drain=901) + ok("b", 1.1)
    result = run_check(events, disruptions=[Disruption(DRAIN, 0.5, "kill -9")])
    assert [v.split(":")[0] for v in result.violations] == ["unexplained duplicate"]


def test_more_duplicates_than_kills_times_batch_size_are_flagged():
    enqueued = {f"m{i}": "q" for i in range(4)}
    events = []
    for i in range(4):
        events += ok(f"m{i}", 1.0 + i) + ok(f"m{i}", 10.0 + i, pid=1001, drain=901)
    result = run_check(
        events, enqueued, disruptions=[Disruption(DRAIN, 9.0, "kill -9")], batch_size=3
    )
    assert result.duplicates == 4
    assert any(v.startswith("too many duplicates: drain 900 explains 4") for v in result.violations)
    assert any(
        v.startswith("too many duplicates: 4 messages > 1 disruptions") for v in result.violations
    )


def test_a_lost_success_rerun_twice_counts_as_one_message_against_the_bound():
    # `a` succeeded in the killed drain; its first rerun failed (a handler
    # failure), the second succeeded: two duplicate runs, one message.
    events = ok("a", 1.0) + fail("a", 5.0, pid=1001, drain=901) + ok("a", 9.0, pid=1002, drain=902)
    events += ok("b", 1.1)
    result = run_check(events, disruptions=[Disruption(DRAIN, 1.5, "kill -9")], batch_size=1)
    assert result.violations == []
    assert result.duplicates == 2


def test_two_lost_successes_over_a_batch_of_one_are_flagged():
    events = ok("a", 1.0) + ok("b", 1.2) + ok("a", 5.0, pid=1001, drain=901)
    events += ok("b", 5.5, pid=1001, drain=901)
    result = run_check(events, disruptions=[Disruption(DRAIN, 1.5, "kill -9")], batch_size=1)
    assert any(v.startswith("too many duplicates: drain 900 explains 2") for v in result.violations)


def test_a_failed_message_with_too_few_failures_is_flagged():
    enqueued = {"p": "poison"}
    final = [Final("p", "poison", "failed", 3)]
    result = run_check(fail("p", 1.0) + fail("p", 2.0), enqueued, final)
    assert result.violations == [
        "failed without failing: p is failed after 2 handler failure(s) and 0 stalled "
        "requeue(s), max_errors is 3"
    ]
    # ... but a stalled requeue counts as a failure (the contract says so)
    result = run_check(fail("p", 1.0) + fail("p", 2.0), enqueued, final, requeued={"p": 1})
    assert result.violations == []
    assert result.failed == 1
    # and three real failures are what max_errors 3 means
    events = fail("p", 1.0) + fail("p", 2.0) + fail("p", 3.0)
    assert run_check(events, enqueued, final).violations == []


def test_a_failed_message_with_a_low_error_count_is_flagged():
    events = fail("p", 1.0) + fail("p", 2.0) + fail("p", 3.0)
    result = run_check(events, {"p": "poison"}, [Final("p", "poison", "failed", 2)])
    assert result.violations == ["failed too early: p is failed with error_count 2 < 3"]


def test_running_after_failing_for_good_is_flagged():
    events = [e for t in range(5) for e in fail("p", float(t))]
    result = run_check(events, {"p": "poison"}, [Final("p", "poison", "failed", 3)])
    assert result.violations == ["ran after failing for good: p failed 5 times, max_errors 3"]


def test_concurrent_runs_are_flagged():
    events = [
        ev("a", "start", 1.0),
        ev("a", "start", 1.5, pid=1001, drain=901),
        ev("a", "success", 2.0),
        ev("a", "success", 2.5, pid=1001, drain=901),
    ] + ok("b", 3.0)
    result = run_check(events)
    assert any(
        v.startswith("concurrent runs: a ran in drains 900 and 901") for v in result.violations
    )


def test_a_run_that_never_finished_needs_a_disruption():
    events = [ev("a", "start", 1.0)] + ok("a", 5.0, pid=1001, drain=901) + ok("b", 6.0)
    result = run_check(events)
    # its end is unknown, so the rerun also counts as running beside it
    assert [v.split(":")[0] for v in result.violations] == [
        "unexplained interruption",
        "concurrent runs",
    ]
    result = run_check(events, disruptions=[Disruption(DRAIN, 1.2, "kill -9")])
    assert result.violations == [] and result.interrupted == 1


def test_unknown_messages_are_flagged():
    result = run_check(
        ok("a", 1.0) + ok("b", 1.1) + ok("zz", 2.0), final=[Final("yy", "q", "ready", 0)]
    )
    assert "unknown message ran: zz was never enqueued" in result.violations
    assert "unknown message stored: yy was never enqueued" in result.violations


def test_a_worker_killed_mid_run_then_reused_pid():
    # pid 1000 starts `a`, is killed; later the same pid (reused) runs `b`
    events = [ev("a", "start", 1.0)] + ok("b", 3.0) + ok("a", 4.0, pid=1001, drain=901)
    runs = runs_of(events)
    assert [(r.msg, r.outcome) for r in runs] == [("a", None), ("b", "success"), ("a", "success")]


def _writer(path: str, n: int) -> None:
    for i in range(n):
        event(path, f"m{os.getpid()}-{i}-" + "x" * (i % 300), "start")


def test_records_from_concurrent_processes_never_interleave(tmp_path):
    path = str(tmp_path / "history.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 1500)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records = read(path)  # raises on a torn line
    assert len(records) == 6000
    record(path, msg="last", pid=1, drain=0, event="start", t=0.0)
    assert read(path)[-1]["msg"] == "last"
