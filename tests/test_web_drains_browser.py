"""The drain controls in a real browser (Playwright, Debian's Chromium) on SQLite, MariaDB and
PostgreSQL: an operator quiets a real `mq drain --wait` from the run log page and stops a busy
drain from the overview, each through its confirmation page; the drain ends as asked, the run
log says who asked, and the audit log holds exactly one line for each request. A viewer sees
no button."""

from __future__ import annotations

import json

from tests.browser import browser, console, page_as, playwright  # noqa: F401 (fixtures)
from tests.test_stop import SAYS_STOP, _ended, _live, _ran, _release_once, _run
from tests.test_web_drains import _slow_drain
from tests.webconsole import VIEWER, wait_for


def _audit(tmp_path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_quiet_a_waiting_drain_from_the_run_log_page(db, tmp_path, browser, console):
    proc = db.spawn("drain", "-q", "mail", "--wait", "--max-seconds", "300", "--json")
    drain = wait_for(lambda: _live(db, proc.pid), "the waiting drain in mq status")
    name = f"{drain['host']}:{drain['pid']}"

    viewer = page_as(browser, console, VIEWER)
    viewer.goto("/runs")
    assert name in viewer.inner_text("main")
    assert viewer.locator(".drain-controls button").count() == 0  # a viewer has no control

    page = page_as(browser, console)
    page.goto("/runs")
    page.click(f'form[action="/drains/{name}/stop"]:has(input[value=quiet]) button')
    page.wait_for_selector(f"h1 >> text=Quiet drain {name}?")
    assert "mq stop " + name + " --quiet" in page.inner_text("main")
    assert _live(db, proc.pid)["stop_request"] is None  # the confirmation asks nothing yet
    assert [e for e in _audit(tmp_path) if e["action"].endswith("-drain")] == []
    page.click(f"button >> text=Quiet drain {name}")
    page.wait_for_selector("p.flash")
    assert f"asked drain {name}" in page.inner_text("p.flash")

    report = _ended(proc)  # a waiting drain ends at once
    assert (report["claimed"], report["ended"]) == (0, "quiet")
    assert _run(db, proc.pid)["stop_request"]["by"] == "olga (console)"
    [line] = [e for e in _audit(tmp_path) if e["action"].endswith("-drain")]
    assert (line["who"], line["action"], line["queue"], line["count"]) == (
        "olga", "quiet-drain", "mail", 1,
    )  # fmt: skip
    assert name in line["detail"] and line["at"]
    page.goto("/runs")
    assert "(quiet: olga (console))" in page.inner_text("main")


def test_stop_a_busy_drain_from_the_overview(db, tmp_path, browser, console):
    proc, name, ids = _slow_drain(db, tmp_path)
    page = page_as(browser, console)
    page.goto("/")
    page.click(f'form[action="/drains/{name}/stop"]:has(input[value=stop]) button')
    page.wait_for_selector(f"h1 >> text=Stop drain {name}?")
    main = page.inner_text("main")
    assert "thumbs" in main and f"#{ids[0]}" in main  # the queue and the message it runs
    page.click(f"button >> text=Stop drain {name}")
    page.wait_for_selector("p.flash")
    assert f"asked drain {name} (queue thumbs) to stop" in page.inner_text("p.flash")
    assert page.url.rstrip("/") == console.base  # back where the button was

    _release_once(tmp_path, SAYS_STOP)  # the first message ran until the drain read it
    report = _ended(proc)  # its running message finishes, the two others go back
    assert (report["succeeded"], report["returned"], report["ended"]) == (1, 2, "stop")
    assert _ran(tmp_path) == [1]
    listed = json.loads(db.run("list", "-q", "thumbs", "--status", "ready", "--json").output)
    assert sorted(m["id"] for m in listed) == ids[1:]
    [line] = [e for e in _audit(tmp_path) if e["action"].endswith("-drain")]
    assert (line["who"], line["action"], line["queue"], line["count"]) == (
        "olga", "stop-drain", "thumbs", 1,
    )  # fmt: skip

    # The drain ended: its buttons are gone, and the run log says who stopped it.
    page.goto("/")
    assert page.locator(f'form[action="/drains/{name}/stop"]').count() == 0
    page.goto("/runs")
    assert "(stop: olga (console))" in page.inner_text("main")
