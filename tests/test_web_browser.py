"""The console in a real browser (Playwright driving Debian's Chromium, tests/chromium.sh)
against `mq web` and real drains on SQLite, MariaDB and PostgreSQL.

MQ_SCREENSHOTS=1 also writes docs/img/console-overview.png and console-queue.png
(from the SQLite run): `MQ_SCREENSHOTS=1 .venv/bin/python -m pytest
tests/test_web_browser.py -k sqlite`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.browser import browser, console, page_as, playwright  # noqa: F401 (fixtures)
from tests.conftest import REPO
from tests.webconsole import EVIL, VIEWER, fail_messages, wait_for


def stats(db) -> dict[str, Any]:
    return json.loads(db.run("stats", "--json").output)


def test_retry_fifty_failed_from_the_page_and_watch_a_drain_run_them(db, browser, console):
    fail_messages(db, 50)
    page = page_as(browser, console)
    page.goto("/queues/mail?state=failed")
    assert page.locator("table.messages tbody tr").count() == 50
    page.click("form.filter button[value=retry]")
    page.wait_for_selector("form.confirm")  # the count first, then the action
    assert page.locator("[data-count]").get_attribute("data-count") == "50"
    page.click("[data-confirm-button]")
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == "requeued 50 message(s)"
    assert (stats(db)["mail"]["ready"], stats(db)["mail"]["failed"]) == (50, 0)

    page.goto("/queues/mail")
    assert page.locator("table.messages tbody tr").count() == 50
    drain = db.spawn("drain", "-q", "mail", "--handler", "tests.handlers:ok")
    _, err = drain.communicate(timeout=300)
    assert drain.returncode == 0, err
    # the page refreshes itself: the messages go without a reload
    page.wait_for_selector("#live >> text=no message")
    page.goto("/")
    row = page.locator('tr[data-queue="mail"]')
    assert row.locator("td").nth(2).inner_text() == "0"  # ready
    page.goto("/runs")
    assert "mail" in page.inner_text("main")


def test_pause_from_the_page_and_drains_stop_claiming(db, browser, console):
    page = page_as(browser, console)
    page.goto("/queues/thumbs")
    page.click("button[value=pause]")
    page.wait_for_selector("h1 >> text=paused")
    assert stats(db)["thumbs"]["paused"] is True
    assert db.run("enqueue", "-q", "thumbs", "1").exit_code == 0
    drained = db.run("drain", "-q", "thumbs")
    assert drained.exit_code == 0
    assert stats(db)["thumbs"]["ready"] == 1  # nothing was claimed
    page.click("button[value=resume]")
    page.wait_for_selector("text=queue thumbs resumed")
    assert db.run("drain", "-q", "thumbs").exit_code == 0
    assert stats(db)["thumbs"]["ready"] == 0


def test_refusals_viewer_forged_and_unauthenticated(db, browser, console):
    fail_messages(db, 2)
    anonymous = page_as(browser, console, None)
    # (a navigation would stop at the browser's login prompt: net::ERR_INVALID_AUTH_CREDENTIALS)
    refused = anonymous.request.get("/")
    assert refused.status == 401 and "Basic" in refused.headers["www-authenticate"]

    viewer = page_as(browser, console, VIEWER)
    viewer.goto("/queues/mail")
    assert viewer.locator("#sel, form.filter button[value=delete]").count() == 0  # no actions
    status = viewer.evaluate(
        """async () => {
            const token = (await (await fetch('/api/csrf')).json()).csrf_token;
            const body = new URLSearchParams({csrf_token: token, scope: 'matching',
                                              action: 'retry', state: 'failed'});
            return (await fetch('/queues/mail/messages', {method: 'POST', body})).status;
        }"""
    )
    assert status == 403

    operator = page_as(browser, console)
    operator.goto("/queues/mail")
    forged = operator.evaluate(
        """async () => {
            const body = new URLSearchParams({scope: 'matching', action: 'delete'});
            return (await fetch('/queues/mail/messages', {method: 'POST', body})).status;
        }"""
    )
    assert forged == 403
    assert stats(db)["mail"]["failed"] == 2


def test_a_script_payload_is_inert_and_refresh_keeps_the_selection(db, browser, console):
    fail_messages(db, 3)
    page = page_as(browser, console)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    ident = json.loads(db.run("list", "-q", "mail", "--json").output)[0]["id"]
    page.goto(f"/messages/{ident}")
    assert EVIL in page.inner_text("pre.payload")
    assert page.locator("main script").count() == 0
    page.goto("/queues/mail?state=failed&error=raises")
    assert EVIL in page.inner_text("table.messages")  # the error quotes it: as text
    assert page.locator("main script").count() == 0
    box = page.locator(f'input[name="ids"][value="{ident}"]')
    box.check()
    before = int(page.evaluate("document.documentElement.dataset.refreshes || '0'"))
    fail_messages_more = db.run("enqueue", "-q", "mail", "--silent", "9")
    assert fail_messages_more.exit_code == 0
    assert db.run("drain", "-q", "mail").exit_code == 0
    # polled from here: wait_for_function's string would be an eval, which the CSP forbids
    wait_for(
        lambda: page.evaluate(
            f"() => parseInt(document.documentElement.dataset.refreshes || '0') > {before} && "
            "document.querySelectorAll('table.messages tbody tr').length === 4"
        ),
        "the page to refresh itself with the fourth failed message",
    )
    assert page.locator(f'input[name="ids"][value="{ident}"]').is_checked()
    assert page.input_value('form.filter input[name="error"]') == "raises"
    assert dialogs == []
    if db.kind == "sqlite" and os.environ.get("MQ_SCREENSHOTS") == "1":
        shots = Path(REPO) / "docs" / "img"
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "console-queue.png"), full_page=True)
        page.goto("/")
        page.screenshot(path=str(shots / "console-overview.png"), full_page=True)


def test_the_bench_script_runs(sqlite_db, tmp_path):
    """bench/web_console.py on a small table: the figure is the bench's, not this test's."""
    result = subprocess.run(
        [sys.executable, "bench/web_console.py", "--messages", "2000",
         "--database", f"sqlite:///{tmp_path}/bench.db"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=sqlite_db.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "overview" in result.stdout and "filtered queue page" in result.stdout
