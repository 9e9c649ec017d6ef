"""Every destructive action of the console driven in Chromium through its confirmation page
(issue 49): the count it shows, then what changed, checked against `mq stats --json` and
`mq list --json`, on SQLite, MariaDB and PostgreSQL. Includes F2: a filter typed but not
applied is the one "all matching" acts on."""

from __future__ import annotations

import json
from typing import Any

from tests.browser import browser, console, page_as, playwright  # noqa: F401 (fixtures)
from tests.test_gc import make_stalled
from tests.webconsole import fail_messages


def stats(db, queue: str) -> dict[str, Any]:
    return json.loads(db.run("stats", "--json").output)[queue]


def listed(db, queue: str, state: str | None = None) -> list[int]:
    found = db.run("list", "-q", queue, "--json", *(["--status", state] if state else []))
    return [m["id"] for m in json.loads(found.output)]


def shown_count(page: Any) -> tuple[str, int]:
    """The confirmation page's count: ("exact" or "at least", N)."""
    page.wait_for_selector("form.confirm")
    count = page.locator("[data-count]")
    return count.get_attribute("data-exact"), int(count.get_attribute("data-count"))


def confirm(page: Any, typed: str | None = None) -> str:
    if typed is not None:
        page.fill('form.confirm input[name="confirm"]', typed)
    page.click("[data-confirm-button]")
    page.wait_for_selector("p.flash")
    return page.inner_text("p.flash")


def test_retry_and_delete_by_filter_selection_and_message(db, browser, console):
    fail_messages(db, 4)
    assert db.run("enqueue", "-q", "mail", "--silent", "7", "8").exit_code == 0
    page = page_as(browser, console)

    # F2: state and error typed, Filter not pressed, "Delete all matching" clicked
    page.goto("/queues/mail")
    page.select_option('form.filter select[name="state"]', "failed")
    page.fill('form.filter input[name="error"]', "no-such-error-text")
    page.click("form.filter button[value=delete]")
    assert shown_count(page) == ("exact", 0)
    assert "no-such-error-text" in page.inner_text(".confirm-what")
    assert confirm(page) == "deleted 0 message(s)"
    assert (stats(db, "mail")["failed"], stats(db, "mail")["ready"]) == (4, 2)

    # a state typed, not applied: counted as `mq stats` counts it, and only it acted on
    page.goto("/queues/mail")
    page.select_option('form.filter select[name="state"]', "failed")
    page.click("form.filter button[value=retry]")
    assert shown_count(page) == ("exact", stats(db, "mail")["failed"]) == ("exact", 4)
    assert confirm(page) == "requeued 4 message(s)"
    assert (stats(db, "mail")["failed"], stats(db, "mail")["ready"]) == (0, 6)

    # the selected ones
    first, second, *rest = listed(db, "mail")
    page.goto("/queues/mail")
    page.check(f'input[name="ids"][value="{first}"]')
    page.check(f'input[name="ids"][value="{second}"]')
    page.click("#sel button[value=delete]")
    assert shown_count(page) == ("exact", 2)
    assert confirm(page) == "deleted 2 message(s)"
    assert listed(db, "mail") == rest

    # one message, from its page
    assert db.run("drain", "-q", "mail").exit_code == 0  # all fail again
    page.goto(f"/messages/{rest[0]}")
    page.click("form.bar button[value=retry]")
    assert shown_count(page) == ("exact", 1)
    assert confirm(page) == "requeued 1 message(s)"
    assert page.url.endswith(f"/messages/{rest[0]}")
    assert listed(db, "mail", "ready") == [rest[0]]
    page.goto(f"/messages/{rest[1]}")
    page.click("form.bar button[value=delete]")
    assert shown_count(page) == ("exact", 1)
    assert confirm(page) == "deleted 1 message(s)"
    assert rest[1] not in listed(db, "mail")

    # an empty filter: the whole queue, once its name is typed
    left = len(listed(db, "mail"))
    page.goto("/queues/mail")
    page.click("form.filter button[value=delete]")
    assert shown_count(page) == ("exact", left)
    assert page.locator('form.confirm input[name="confirm"]').count() == 1
    assert confirm(page, "mail") == f"deleted {left} message(s)"
    assert listed(db, "mail") == []
    actions = page.request.get("/api/actions").json()
    assert [a["count"] for a in actions] == [left, 1, 1, 2, 4, 0]  # one line each


def test_purge_and_requeue_through_their_confirmation(db, browser, console):
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1", "2", "3").exit_code == 0
    assert db.run("enqueue", "-q", "thumbs", "--silent", "--delay", "1h", "4", "5").exit_code == 0
    page = page_as(browser, console)

    # F5: purge "ready" leaves the delayed ones
    page.goto("/queues/thumbs")
    page.click("details.purge summary")
    page.select_option('details.purge select[name="status"]', "ready")
    page.click("details.purge button")
    assert shown_count(page) == ("exact", 3)
    assert confirm(page, "thumbs") == "deleted 3 ready message(s) from queue thumbs"
    assert (stats(db, "thumbs")["ready"], stats(db, "thumbs")["delayed"]) == (0, 2)

    # requeue stalled: max_errors 1, so they fail instead of going back to ready
    make_stalled(db, "mail", 2)
    page.goto("/queues/mail")
    page.click("button:has-text('Requeue stalled')")
    assert shown_count(page) == ("exact", 2)
    said = confirm(page)
    assert (
        said == "stalled messages of mail: 0 back to ready; 2 reached max_errors and are now failed"
    )
    assert (stats(db, "mail")["stalled"], stats(db, "mail")["failed"]) == (0, 2)

    page.click("button:has-text('Requeue failed')")
    assert shown_count(page) == ("exact", 2)
    assert confirm(page) == "failed messages of mail: 2 back to ready"
    assert (stats(db, "mail")["failed"], stats(db, "mail")["ready"]) == (0, 2)
    line = page.request.get("/api/actions").json()[0]
    assert (line["action"], line["count"], line["outcome"]) == (
        "requeue-failed", 2, {"ready": 2, "failed": 0},
    )  # fmt: skip
