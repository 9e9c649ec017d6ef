"""The failures page in a real browser (Playwright driving Debian's Chromium) against
`mq web` on SQLite, MariaDB and PostgreSQL: a queue with two kinds of failures, its
groups and counts checked against `mq list --status failed --json`."""

from __future__ import annotations

import json
from collections import Counter

from tests.browser import browser, console, playwright  # noqa: F401 (fixtures)
from tests.test_web_find import two_kinds
from tests.webconsole import OPERATOR


def error_class(last_error: str) -> str:
    """What a Python handler's failure is grouped by: its last line's exception class."""
    return last_error.strip().splitlines()[-1].split(": ", 1)[0]


def test_the_failures_page_groups_two_kinds_as_the_cli_lists_them(db, tmp_path, browser, console):
    two_kinds(db, tmp_path)
    listed = json.loads(db.run("list", "-q", "mail", "--status", "failed", "--json").output)
    expected = Counter(error_class(m["last_error"]) for m in listed)
    assert expected == {"ValueError": 3, "RuntimeError": 2}

    context = browser.new_context(
        http_credentials={"username": OPERATOR[0], "password": OPERATOR[1]},
        base_url=console.base, viewport={"width": 1280, "height": 900},
    )  # fmt: skip
    context.set_default_timeout(120_000)  # a hang's deadline on a loaded machine
    page = context.new_page()
    page.goto("/")
    page.click('tr[data-queue="mail"] a[title="failed messages by error"]')
    page.wait_for_selector("table.failures")
    assert page.url.endswith("/queues/mail/failures")
    rows = page.locator("table.failures tbody tr")
    cells = [
        (rows.nth(i).locator("td.err"), rows.nth(i).locator("td.count"))
        for i in range(rows.count())
    ]
    shown = {error.inner_text(): int(count.inner_text()) for error, count in cells}
    assert shown == expected
    assert page.locator("main script").count() == 0
    # each group's "list" link shows exactly its messages on the queue page
    for error, count in expected.items():
        row = page.locator("table.failures tbody tr", has_text=error)
        assert row.locator("a", has_text="Retry group").count() == 1
        row.locator("a", has_text="list").click()
        page.wait_for_selector("table.messages")
        assert page.locator("table.messages tbody tr").count() == count
        page.go_back()
    context.close()
