"""What the console's browser tests share: Debian's Chromium driven by Playwright
(tests/chromium.sh installs it; under CI=true a missing one fails the test), a real
`mq web` with an operator and a viewer, and a page logged in as one of them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.webconsole import OPERATOR, Server, write_config

ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
CHROMIUM = "/usr/bin/chromium"


def launch(playwright: Any, *extra: str) -> Any:
    """Chromium, headless, with ``extra`` flags."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[*ARGS, *extra])


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        reason = "chromium is not installed (tests/chromium.sh installs it)"
        if IN_CI:
            pytest.fail(f"{reason}; CI=true: this test must run")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as found:
        yield found


@pytest.fixture(scope="module")
def browser(playwright: Any) -> Iterator[Any]:
    launched = launch(playwright)
    yield launched
    launched.close()


@pytest.fixture
def console(db: Any, tmp_path: Any) -> Iterator[Server]:
    write_config(tmp_path)
    server = Server(db)
    yield server
    server.stop()


def page_as(browser: Any, server: Server, user: tuple[str, str] | None = OPERATOR) -> Any:
    credentials = {"username": user[0], "password": user[1]} if user else None
    context = browser.new_context(
        http_credentials=credentials, base_url=server.base, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(120_000)  # a hang's deadline on a loaded machine
    return context.new_page()
