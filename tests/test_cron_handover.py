"""Cron's next run of a line takes over from the run that is ending (host/slots.py:
take_over): `--max-seconds 60` every minute leaves no part of the minute without a
drain, and a run whose slot's holder is far from its end still exits at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mq_cli.host import slots

HANG = 600  # seconds: only a hang reaches this


def _slot_file(tmp: Path, queue: str) -> Path | None:
    found = list(tmp.glob(f"xdg-runtime/mq/db-*/{queue}.0.lock"))
    return found[0] if found else None


def _holder(tmp: Path, queue: str) -> int | None:
    path = _slot_file(tmp, queue)
    fields = path.read_text().split() if path is not None else []
    return int(fields[0]) if fields else None


def _until(what, deadline: float = HANG, every: float = 0.005):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = what()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {deadline} s: {what}")


def test_the_next_run_takes_over_the_slot_of_the_run_that_is_ending(db):
    # The minute's run: its --max-seconds passes while its last handler still
    # runs (until the test releases it), so its slot is busy past its announced end.
    assert db.run("enqueue", "-q", "mail", '{"n": 1}').exit_code == 0
    started, release = db.tmp / "started", db.tmp / "release"
    handler = f"exec:sh -c 'touch {started}; while [ ! -e {release} ]; do sleep 0.02; done'"
    # 20 s: time enough to claim on a loaded machine (the deadline counts from its start).
    ending = db.spawn("-v", "drain", "-q", "mail", "--handler", handler, "--max-seconds", "20")
    _until(lambda: started.exists() or ending.poll() is not None)
    assert _holder(db.tmp, "mail") == ending.pid, ending.communicate()
    end = float(_slot_file(db.tmp, "mail").read_text().split()[1])
    assert time.time() < end <= time.time() + 20  # it said when it ends
    # Cron starts the next run as this one's end comes near.
    time.sleep(max(end - slots.HANDOVER_WITHIN + 1 - time.time(), 0))

    # The next minute's run finds the slot busy and waits for it, not exiting.
    log = db.tmp / "following.err"
    with log.open("wb") as err:
        following = db.spawn("-v", "drain", "-q", "mail", "--handler", "exec:cat", "--wait",
                             "--max-seconds", "600", "--json", stderr=err)  # fmt: skip
    try:
        _until(lambda: b"waiting to take it over" in log.read_bytes() or following.poll())
        assert following.poll() is None, log.read_bytes()
        release.touch()
        ending.communicate(timeout=HANG)
        assert ending.returncode == 0
        gone = time.monotonic()
        _until(lambda: _holder(db.tmp, "mail") == following.pid or following.poll() is not None)
        gap_ms = (time.monotonic() - gone) * 1000
        print(f"FIGURES handover ({db.kind}): the next run held the slot {gap_ms:.0f} ms after")
        assert following.poll() is None, log.read_bytes()  # it took over, did not exit busy

        # ... and drains what comes now.
        assert db.run("enqueue", "-q", "mail", '{"n": 2}').exit_code == 0
        _until(lambda: not json.loads(db.run("stats", "--json").output).get("mail"), every=0.2)
    finally:
        following.terminate()
        out, _ = following.communicate(timeout=HANG)
    assert following.returncode == 0, log.read_bytes()
    report = json.loads(out)
    assert report["busy"] == [] and report["succeeded"] == 1, report
    assert b"took over a slot" in log.read_bytes()


@pytest.mark.parametrize("holder_args", [["--max-seconds", "300"], []], ids=["far", "no-end"])
def test_a_run_whose_slot_holder_is_far_from_its_end_exits_at_once(sqlite_db, holder_args):
    holder = sqlite_db.spawn("drain", "-q", "mail", "--handler", "exec:cat", "--wait",
                             *holder_args)  # fmt: skip
    try:
        _until(lambda: _holder(sqlite_db.tmp, "mail") == holder.pid)
        result = sqlite_db.run("drain", "-q", "mail", "--handler", "exec:cat", "--wait",
                               "--max-seconds", "120", "--json")  # fmt: skip
        assert result.exit_code == 0
        report = json.loads(result.output)
        assert report["busy"] == ["mail"] and report["ended"] == "empty", report
        assert report["seconds"] < slots.HANDOVER_WITHIN  # it did not wait for the slot
    finally:
        holder.terminate()
        holder.communicate(timeout=HANG)


def test_a_slot_says_its_holders_end(tmp_path):
    lock_dir = str(tmp_path / "locks")
    with slots.acquire(lock_dir, "q", 2, ends_at=1234.5) as first:
        assert Path(first.path).read_text().split()[1] == "1234.500"
        with slots.acquire(lock_dir, "q", 2) as second:
            assert Path(second.path).read_text().split() == [str(__import__("os").getpid())]
            assert slots.ending_at(lock_dir, "q", 2) == 1234.5
    assert slots.ending_at(lock_dir, "q", 2) is None  # released: nobody ends


def test_a_run_that_ends_before_the_holder_does_not_wait(tmp_path):
    lock_dir = str(tmp_path / "locks")
    with slots.acquire(lock_dir, "q", 1, ends_at=time.time() + 4):
        started = time.monotonic()
        assert slots.take_over(lock_dir, "q", 1, time.time() + 3.5, lambda: False) is None
        assert time.monotonic() - started < 3  # did not wait out its own 3.5 s
        # a run with time left waits, until told to stop
        assert slots.take_over(lock_dir, "q", 1, time.time() + 60, lambda: True) is None
