"""A drain that cannot start leaves a trace that `mq status` shows, on every backend."""

from __future__ import annotations

import json

from tests.fleet_helpers import enqueue, finish, host_config, spawn_drain


def drain_exit(db, config, *args: str) -> tuple[int, str]:
    proc = spawn_drain(db, config, db.tmp / "history.jsonl", *args)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


def test_status_names_why_no_drain_could_start_until_one_does(db, tmp_path):
    bad = host_config(tmp_path, db.url, 0, "jobs", {"handler": "nosuch.module:fn"})
    enqueue(db, "jobs", 3, sleep=0)
    code, err = drain_exit(db, bad, "-q", "jobs")
    assert code == 2 and "no module named 'nosuch'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    result = db.run("-c", str(bad), "status", "--json")
    assert result.exit_code == 0, result.output
    stuck = json.loads(result.stdout)["queues"]["jobs"]["cannot_start"]
    assert "no module named 'nosuch'" in stuck["error"]
    assert stuck["since"].endswith("Z")
    text = db.run("-c", str(bad), "status").stdout
    assert "jobs: no drain could start since" in text and "nosuch" in text
    page = tmp_path / "status.html"
    assert db.run("-c", str(bad), "status", "--html", str(page)).exit_code == 0
    assert "no drain could start since" in page.read_text()
    # A second failure keeps the first one's time.
    drain_exit(db, bad, "-q", "jobs")
    again = json.loads(db.run("status", "--json").stdout)["queues"]["jobs"]["cannot_start"]
    assert again["since"] == stuck["since"]
    # Fixed: the next drain starts, and the note goes.
    good = host_config(tmp_path, db.url, 1, "jobs", {"handler": "tests.faults.jobs:slow"})
    assert (
        finish([spawn_drain(db, good, tmp_path / "history.jsonl", "-q", "jobs")])[0]["succeeded"]
        == 3
    )
    assert json.loads(db.run("status", "--json").stdout)["queues"]["jobs"]["cannot_start"] is None


def test_a_queue_missing_from_the_config_shows_in_status(db, tmp_path):
    config = host_config(tmp_path, db.url, 0, "jobs", {"handler": "tests.faults.jobs:slow"})
    code, err = drain_exit(db, config, "-q", "ghost")
    assert code == 2 and "has no handler" in err
    queues = json.loads(db.run("status", "--json").stdout)["queues"]
    assert "has no handler" in queues["ghost"]["cannot_start"]["error"]
