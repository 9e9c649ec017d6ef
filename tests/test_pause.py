"""`mq pause` / `mq resume`: stored in the database, so every host's drains skip
a paused queue; producers keep enqueuing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "ran.jsonl"
    monkeypatch.setenv("MQ_TEST_LOG", str(log))
    return lambda: [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_a_paused_queue_is_skipped_by_drains_until_resumed(db, ran, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  mail: {handler: 'tests.jobs:record'}\n  other: {handler: 'tests.jobs:record'}\n"
    )
    result = db.run("pause", "-q", "mail")
    assert result.exit_code == 0, result.output
    assert "queue mail paused" in result.stdout and "mq resume -q mail" in result.stdout
    assert db.run("pause", "-q", "mail").stdout.startswith("queue mail was paused already")
    assert db.run("enqueue", "-q", "mail", '"m"').exit_code == 0  # producers are not stopped
    assert db.run("enqueue", "-q", "other", '"o"').exit_code == 0

    silent = db.run("drain")
    assert (silent.exit_code, silent.output) == (0, "")
    assert [r["payload"] for r in ran()] == ["o"]
    report = json.loads(db.run("drain", "--json").stdout)
    assert report["paused"] == ["mail"] and report["claimed"] == 0

    stats = json.loads(db.run("stats", "--json").stdout)
    assert stats["mail"]["paused"] is True and stats["mail"]["ready"] == 1
    assert stats["other"]["paused"] is False
    assert "mail (paused)" in db.run("stats").stdout
    prom = tmp_path / "mq.prom"
    db.run("stats", "--prometheus", str(prom))
    assert 'mq_paused{queue="mail"} 1' in prom.read_text()

    assert db.run("resume", "-q", "mail").stdout.strip() == "queue mail resumed"
    assert db.run("resume", "-q", "mail").stdout.strip() == "queue mail was not paused"
    assert db.run("drain").exit_code == 0
    assert [r["payload"] for r in ran()] == ["o", "m"]


def test_a_long_queue_name_can_be_paused(db):
    long = "q" * 64
    assert db.run("pause", "-q", long).exit_code == 0
    stats = json.loads(db.run("stats", "--json").stdout)
    assert stats[long]["paused"] is True
    assert db.run("resume", "-q", long).stdout.strip() == f"queue {long} resumed"


def test_a_running_drain_stops_claiming_within_seconds(db, ran, tmp_path):
    (tmp_path / "mq.yaml").write_text(
        "queues:\n  q: {handler: 'tests.jobs:sleepy', batch_size: 1}\n"
    )
    payloads = [json.dumps({"n": i, "sleep": 0.2}) for i in range(60)]
    assert db.run("enqueue", "-q", "q", *payloads).exit_code == 0
    drain = db.spawn("drain", "-q", "q", "--wait", "--max-seconds", "60", "--json",
                     env=db.env(MQ_TEST_LOG=str(tmp_path / "ran.jsonl")))  # fmt: skip
    end = time.monotonic() + 30
    while len(ran()) < 3 and time.monotonic() < end:
        time.sleep(0.05)
    assert db.run("pause", "-q", "q").exit_code == 0
    out, err = drain.communicate(timeout=30)  # it leaves long before --max-seconds
    assert drain.returncode == 0, err
    report = json.loads(out)
    assert report["paused"] == ["q"]
    assert len(ran()) < 40  # stopped within seconds, not after the whole queue
    stats = json.loads(db.run("stats", "--json").stdout)["q"]
    assert stats["processing"] == 0 and stats["ready"] == 60 - len(ran())
