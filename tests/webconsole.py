"""What the console's tests share: a config with an operator and a viewer, failed messages,
a real `mq web` process, an HTTP client that keeps its cookies (urllib), and what an
action's confirmation page shows and posts."""

from __future__ import annotations

import base64
import html
import http.cookiejar
import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.conftest import Db

OPERATOR = ("olga", "operator-password")
VIEWER = ("victor", "viewer-password")
EVIL = "<script>alert(1)</script>"


@cache
def hashes() -> tuple[str, str]:
    from werkzeug.security import generate_password_hash

    return generate_password_hash(OPERATOR[1]), generate_password_hash(VIEWER[1])


def write_config(tmp: Path, extra: str = "") -> Path:
    op, viewer = hashes()
    path = tmp / "mq.yaml"
    path.write_text(
        "defaults: {max_errors: 1, retry_delay: 0}\n"
        "queues:\n"
        "  mail: {handler: 'tests.handlers:raises'}\n"
        "  thumbs: {handler: 'tests.handlers:ok'}\n"
        "web:\n"
        "  users:\n"
        f"    {OPERATOR[0]}: {{password_hash: '{op}', role: operator}}\n"
        f"    {VIEWER[0]}: {{password_hash: '{viewer}', role: viewer}}\n"
        f"  audit_log: {tmp / 'audit.jsonl'}\n" + extra
    )
    return path


def fail_messages(db: Db, count: int, queue: str = "mail") -> None:
    """``count`` failed messages in ``queue`` (its handler raises; max_errors 1)."""
    payloads = [json.dumps(EVIL)] + [str(i) for i in range(1, count)]
    assert db.run("enqueue", "-q", queue, "--silent", *payloads).exit_code == 0
    drained = db.run("drain", "-q", queue)
    assert drained.exit_code == 0, drained.output
    assert json.loads(db.run("stats", "-q", queue, "--json").output)[queue]["failed"] == count


def basic(user: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()


@dataclass
class Answer:
    status: int
    body: str
    headers: Any

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """A browser without a browser: cookies kept, Basic credentials sent."""

    def __init__(self, base: str, user: tuple[str, str] | None):
        self.base = base
        self.user = user
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def request(self, method: str, path: str, data: dict | None = None, **headers: str) -> Answer:
        body = None if data is None else urllib.parse.urlencode(data, doseq=True).encode()
        req = urllib.request.Request(self.base + path, data=body, method=method)
        if self.user is not None:
            req.add_header("Authorization", basic(self.user))
        for name, value in headers.items():
            req.add_header(name.replace("_", "-"), value)
        try:
            with self.opener.open(req, timeout=60) as response:
                return Answer(response.status, response.read().decode(), response.headers)
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read().decode(), exc.headers)

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, path: str, data: dict) -> Answer:
        return self.request("POST", path, data)

    def token(self, path: str = "/") -> str:
        page = self.get(path)
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.body)
        if found is None:  # a page without a form (a viewer's): the API hands one out
            return self.get("/api/csrf").json()["csrf_token"]
        return found.group(1)


class Server:
    """`mq web` as a real process on a free loopback port, stopped by its pid."""

    def __init__(self, db: Db, *args: str):
        self.process = db.spawn("web", "--bind", "127.0.0.1:0", *args)
        assert self.process.stderr is not None
        line = self.process.stderr.readline().decode()
        found = re.search(r"http://[^ ]+/", line)
        if found is None:
            self.process.kill()
            rest = self.process.communicate(timeout=30)[1].decode()
            raise AssertionError(f"mq web did not start: {line}{rest}")
        self.base = found.group(0).rstrip("/")

    def client(self, user: tuple[str, str] | None = OPERATOR) -> Client:
        return Client(self.base, user)

    def stop(self) -> str:
        """Stop it; what it printed after its address line."""
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stderr is not None
        # read through the reader that read the address: it may hold the next lines
        err = self.process.stderr.read()
        self.process.stderr.close()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return err.decode()


def wait_for(check: Any, what: str, deadline: float = 120.0) -> Any:
    """Until ``check()`` is true; the deadline only catches a hang."""
    end = time.monotonic() + deadline
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- the confirmation page of an action (mq_cli/web/templates/confirm.html) ---------------


def confirmation(client, path: str) -> tuple[dict, str, str]:
    """The confirmation page's count and its form: (fields, action URL, page text)."""
    page = client.get(path)
    assert page.status == 200, page.body
    form = re.search(r'<form class="confirm" method="post" action="([^"]+)">(.*?)</form>',
                     page.body, re.DOTALL)  # fmt: skip
    assert form is not None, page.body
    fields: dict = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(2)
    ):
        fields.setdefault(name, []).append(html.unescape(value))
    return fields, html.unescape(form.group(1)), page.body


def said(answer) -> str:
    """The flash lines of the page an action redirected to."""
    return " | ".join(
        html.unescape(s)
        for s in re.findall(r'<p class="flash [^"]*" role="status">(.*?)</p>', answer.body)
    )


def count_shown(body: str) -> tuple[str, int]:
    found = re.search(r'data-count="(\d+)" data-exact="(exact|at least|about)"', body)
    assert found is not None, body
    return found.group(2), int(found.group(1))
