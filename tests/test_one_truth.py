"""Every view tells one truth: `show`, `list` (text and JSON), `stats`, `status` and
`gc` call a message the same state, and none of them changes a row.

The two states that used to split the views: a message of a drain killed with -9
(its lock is free; its heartbeat is still fresh) and a message in retry backoff
(stored `ready`, available later).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.conftest import Db
from tests.faults.harness import wait_for

READ_ONLY = [
    ["list", "-q", "q"], ["list", "-q", "q", "--json"], ["list"], ["stats"],
    ["stats", "--json"], ["status"], ["status", "--json"], ["gc", "--stalled"],
    ["gc", "--stalled", "--json"], ["gc", "--errors"], ["gc", "--stalled", "--check"],
]  # fmt: skip


def _config(db: Db, handler: str) -> Path:
    path = db.tmp / "mq.yaml"
    path.write_text(
        f"lock_dir: {db.tmp / 'locks'}\n"
        "queues:\n"
        f"  q: {{handler: {json.dumps(handler)}, retry_delay: 1h, stalled_after: 1h}}\n"
    )
    return path


def _rows(db: Db) -> list[tuple]:
    return db.sql(
        "SELECT id, queue, status, error_count, available_at, owner, heartbeat_at, last_error "
        "FROM mq_messages ORDER BY id"
    )


def _views(db: Db, config: Path, ident: int) -> dict[str, object]:
    """What each view calls message ``ident`` (one message in queue q)."""

    def run(*args: str) -> str:
        result = db.run("-c", str(config), *args)
        assert result.exit_code in (0, 1), result.output  # gc --check: 1 when it found one
        return result.stdout

    (listed,) = json.loads(run("list", "-q", "q", "--json"))
    table = run("list", "-q", "q").splitlines()
    text_state = table[1].split()[1]
    shown = json.loads(run("show", str(ident), "--json"))
    show_text = next(x for x in run("show", str(ident)).splitlines() if x.startswith("status:"))
    stats = json.loads(run("stats", "--json"))["q"]
    counted = [s for s in ("ready", "delayed", "processing", "stalled", "failed") if stats[s]]
    status = json.loads(run("status", "--json"))["queues"]["q"]
    status_counted = [
        s for s in ("ready", "delayed", "processing", "stalled", "failed") if status[s]
    ]
    return {
        "list --json": listed["state"],
        "list": text_state,
        "show --json": shown["state"],
        "show": show_text.split()[1],
        "stats": counted,
        "status --json": status_counted,
    }


def _agree(views: dict[str, object], state: str) -> None:
    expected = {
        "list --json": state, "list": state, "show --json": state, "show": state,
        "stats": [state], "status --json": [state],
    }  # fmt: skip
    assert views == expected


def test_a_killed_drains_message_is_stalled_in_every_view_and_reading_changes_nothing(db: Db):
    config = _config(db, "tests.jobs:wait_for_file")
    payload = json.dumps({"until": str(db.tmp / "never")})
    result = db.run("-c", str(config), "enqueue", "-q", "q", payload)
    ident = int(result.stdout)
    log = db.tmp / "log.jsonl"
    drain = db.spawn("-c", str(config), "drain", "-q", "q", env=db.env(MQ_TEST_LOG=str(log)))
    wait_for(lambda: log.exists() and "start" in log.read_text(), timeout=60)
    drain.send_signal(signal.SIGKILL)
    drain.communicate()

    def stalled() -> bool:  # once the kernel has freed the dead drain's lock
        listed = db.run("-c", str(config), "list", "-q", "q", "--json").stdout
        return json.loads(listed)[0]["state"] == "stalled"

    wait_for(stalled, timeout=60)
    _agree(_views(db, config, ident), "stalled")
    before = _rows(db)
    for args in READ_ONLY:
        result = db.run("-c", str(config), *args)
        assert result.exit_code in (0, 1), (args, result.output)
        assert _rows(db) == before, args
    listed = db.run("-c", str(config), "gc", "--stalled", "--json")
    assert [m["id"] for m in json.loads(listed.stdout)] == [ident]
    show = db.run("-c", str(config), "show", str(ident)).stdout
    assert "mq gc --stalled --requeue -q q" in show


def test_a_message_in_retry_backoff_is_delayed_in_every_view(db: Db):
    config = _config(db, "tests.handlers:raises")
    ident = int(db.run("-c", str(config), "enqueue", "-q", "q", '"x"').stdout)
    assert db.run("-c", str(config), "drain", "-q", "q").exit_code == 0
    _agree(_views(db, config, ident), "delayed")
    found = db.run("-c", str(config), "list", "-q", "q", "--status", "delayed", "--json")
    assert [m["id"] for m in json.loads(found.stdout)] == [ident]
    ready = db.run("-c", str(config), "list", "-q", "q", "--status", "ready")
    assert ready.stdout.strip() == "no ready messages in queue q"
    show = db.run("-c", str(config), "show", str(ident)).stdout
    assert "status:       delayed (ready in " in show


def test_status_text_has_every_count_of_stats(db: Db):
    config = _config(db, "tests.handlers:raises")
    db.run("-c", str(config), "enqueue", "-q", "q", '"x"', '"y"')
    assert db.run("-c", str(config), "drain", "-q", "q", "--max-messages", "1").exit_code == 0
    text = db.run("-c", str(config), "status").stdout
    block = text.split("queues (")[1].splitlines()
    headers = block[1].split()
    row = dict(zip(headers, block[2].split(), strict=False))
    assert headers[:6] == ["QUEUE", "READY", "DELAYED", "PROCESSING", "STALLED", "FAILED"]
    assert (row["READY"], row["DELAYED"], row["STALLED"]) == ("1", "1", "0")


def test_a_bad_path_and_a_bad_id_are_mq_lines(db: Db, tmp_path: Path):
    for args in (
        ["status", "--html", str(tmp_path / "no" / "such" / "dir" / "page.html")],
        ["stats", "--prometheus", str(tmp_path / "no" / "such" / "dir" / "mq.prom")],
    ):
        result = db.run(*args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("mq: cannot write ") and "No such file or directory" in line
    for args in (["show", "abc"], ["retry", "1", "x"], ["delete", "0"]):
        result = db.run(*args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.splitlines()
        assert all(line.startswith("mq: ") for line in lines), result.stderr
        assert "is not a message id" in lines[0]


def test_a_live_runs_counts_are_written_between_its_slices(db: Db):
    """CLAIMED/DONE of a live drain in `mq status` come with the run's own counts
    (runlog.COUNTS_SECONDS), not only with its 20 s slice."""
    from mq_cli.host import runlog

    config = _config(db, "exec:cat")
    drain = db.spawn("-c", str(config), "drain", "-q", "q", "--wait", "--max-seconds", "300")
    try:
        for n in range(3):
            assert db.run("-c", str(config), "enqueue", "-q", "q", f'{{"n": {n}}}').exit_code == 0

        def live_counts() -> tuple[int, int] | None:
            runs = json.loads(db.run("-c", str(config), "status", "--json").stdout)["runs"]
            live = [r for r in runs if r["ended_at"] is None]
            return (live[0]["claimed"], live[0]["succeeded"]) if live else None

        wait_for(lambda: live_counts() == (3, 3), timeout=600)
        # Not all three came with a slice (one comes with a message that ran over
        # RUNNING_AFTER, on a loaded machine): the counts came on their own.
        (sliced,) = db.sql("SELECT COALESCE(SUM(done), 0) FROM mq_messages_rollup")[0]
        assert int(sliced) < 3
        assert runlog.COUNTS_SECONDS < runlog.SLICE_SECONDS
    finally:
        drain.terminate()
        drain.communicate(timeout=600)
