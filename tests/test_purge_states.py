"""`mq purge --status STATE`: every state `mq list --status` shows, each with the same meaning
(issue 49, F5: `ready` never includes `delayed`), on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import json

from tests.test_gc import make_failed, make_processing, make_ready, make_stalled


def stats(db, queue: str = "jobs") -> dict:
    return json.loads(db.run("stats", "--json").output).get(queue, {})


def listed(db, state: str, queue: str = "jobs") -> list[int]:
    found = db.run("list", "-q", queue, "--status", state, "--json")
    assert found.exit_code == 0, found.output
    return [m["id"] for m in json.loads(found.output)]


def delayed(db, count: int, queue: str = "jobs") -> list[int]:
    payloads = [str(i) for i in range(count)]
    done = db.run("enqueue", "-q", queue, "--delay", "1h", *payloads)
    assert done.exit_code == 0, done.output
    return [int(line) for line in done.output.split()]


def test_purge_ready_leaves_delayed_messages_in_place(db):
    ready = make_ready(db, "jobs", 3)
    later = delayed(db, 2)
    assert (stats(db)["ready"], stats(db)["delayed"]) == (3, 2)
    result = db.run("purge", "-q", "jobs", "--status", "ready", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 3 ready message(s) from queue jobs" in result.stdout
    assert (stats(db)["ready"], stats(db)["delayed"]) == (0, 2)
    assert listed(db, "delayed") == later and not set(ready) & set(listed(db, "delayed"))

    result = db.run("purge", "-q", "jobs", "--status", "delayed", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 delayed message(s) from queue jobs" in result.stdout
    assert stats(db) == {}  # nothing left in the queue


def test_purge_stalled_is_what_gc_stalled_delete_would_delete(db):
    stalled = make_stalled(db, "jobs", 2)
    live = make_processing(db, "jobs")
    failed = make_failed(db, "jobs", 1)
    looked = json.loads(db.run("gc", "--stalled", "-q", "jobs", "--json").output)
    assert sorted(m["id"] for m in looked) == stalled
    result = db.run("purge", "-q", "jobs", "--status", "stalled", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 stalled message(s) from queue jobs" in result.stdout
    counts = stats(db)
    assert (counts["stalled"], counts["processing"], counts["failed"]) == (0, 1, 1)
    assert listed(db, "processing") == [live] and listed(db, "failed") == failed


def test_purge_processing_takes_live_claims_only_and_only_with_force(db):
    stalled = make_stalled(db, "jobs", 1)
    live = make_processing(db, "jobs")
    refused = db.run("purge", "-q", "jobs", "--status", "processing", "--yes")
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert listed(db, "processing") == [live]
    result = db.run("purge", "-q", "jobs", "--status", "processing", "--yes", "--force")
    assert result.exit_code == 0, result.output
    assert "deleted 1 processing message(s) from queue jobs" in result.stdout
    assert listed(db, "processing") == [] and listed(db, "stalled") == stalled


def test_purge_status_offers_every_state_list_shows(db):
    shown = db.run("purge", "--help").output
    listing = db.run("list", "--help").output
    for state in ("ready", "delayed", "processing", "stalled", "failed"):
        assert state in shown and state in listing
    wrong = db.run("purge", "-q", "jobs", "--status", "done", "--yes")
    assert wrong.exit_code == 2


def test_the_terminal_question_counts_the_state_it_deletes(db, monkeypatch):
    make_ready(db, "jobs", 3)
    delayed(db, 2)
    monkeypatch.setattr("mq_cli.cli.operate._stdin_is_terminal", lambda: True)
    result = db.run("purge", "-q", "jobs", "--status", "ready", input="n\n")
    assert "Delete 3 ready message(s) of queue jobs?" in result.output
    result = db.run("purge", "-q", "jobs", "--status", "delayed", input="n\n")
    assert "Delete 2 delayed message(s) of queue jobs?" in result.output
    assert (stats(db)["ready"], stats(db)["delayed"]) == (3, 2)
