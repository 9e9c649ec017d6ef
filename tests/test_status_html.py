"""`mq status --html FILE`: one self-contained page, every stored text escaped, rendered in
headless Chromium (installed by tests/chromium.sh; under CI=true its absence fails the test)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.conftest import IN_CI

EVIL = "<script>alert(1)</script>"
CONFIG = """\
defaults: {max_errors: 1}
queues:
  mail: {handler: "tests.handlers:raises"}
  thumbs: {handler: "tests.handlers:sleeps"}
"""


def make_page(db, tmp_path: Path) -> Path:
    (tmp_path / "mq.yaml").write_text(CONFIG)
    assert db.run("enqueue", "-q", "mail", json.dumps(EVIL), '"two"').exit_code == 0
    assert db.run("enqueue", "-q", "thumbs", '{"sleep": 0}', '{"sleep": 0}').exit_code == 0
    drained = db.run("drain")
    assert drained.exit_code == 0, drained.output
    assert db.run("enqueue", "-q", "thumbs", '{"sleep": 0}').exit_code == 0
    page = tmp_path / "www" / "index.html"
    page.parent.mkdir()
    result = db.run("status", "--html", str(page))
    assert result.exit_code == 0, result.output
    assert result.output == ""  # for cron: silent
    return page


def test_the_page_escapes_every_stored_text(db, tmp_path):
    page = make_page(db, tmp_path)
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert "alert(1)" in text  # the error is shown ...
    assert "<script" not in text.lower()  # ... escaped: no script at all
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<svg" in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    for name in ("mail", "thumbs", "Failed messages", "Live drains", "Recent runs"):
        assert name in text
    # written atomically: nothing left beside it
    assert sorted(p.name for p in page.parent.iterdir()) == ["index.html"]
    # each write records a backlog sample per queue, for the plot
    samples = db.sql("SELECT queue, backlog FROM mq_messages_rollup WHERE backlog IS NOT NULL")
    assert ("thumbs", 1) in samples


def test_html_to_an_unwritable_place_is_a_clear_error(sqlite_db, tmp_path):
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("status", "--html", str(tmp_path / "missing" / "x.html"))
    assert result.exit_code != 0
    assert "x.html" in result.output and "Traceback" not in result.output


def chromium() -> str:
    path = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )
    if path is None:
        reason = "chromium is not installed (tests/chromium.sh installs it)"
        if IN_CI:
            pytest.fail(f"{reason}; CI=true: this test must run")
        pytest.skip(reason)
    return path


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(command, capture_output=True, timeout=120, env=env, cwd=tmp_path)


def png_colours(data: bytes) -> int:
    """How many different pixels an 8-bit RGB or RGBA PNG holds (its data unfiltered)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    size = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * size
    previous = bytearray(stride)
    seen = set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up = previous[i]
            corner = previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 255
        previous = line
        if row % 4 == 0:  # every fourth row is plenty to tell a page from a blank
            seen.update(bytes(line[i : i + size]) for i in range(0, stride, size * 2))
    return len(seen)


def test_the_page_renders_in_headless_chromium(sqlite_db, tmp_path):
    db = sqlite_db
    assert db.run("init").exit_code == 0
    page = make_page(db, tmp_path)
    url = page.resolve().as_uri()
    shot = tmp_path / "page.png"
    result = run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", url)
    assert shot.exists(), result.stderr.decode(errors="replace")[-2000:]
    data = shot.read_bytes()
    assert len(data) > 5000
    assert png_colours(data) > 2  # text, lines and background: no blank page
    dom = run_chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    text = dom.stdout.decode()
    assert "<title>mq status</title>" in text
    for name in ("mail", "thumbs"):
        assert f"<td>{name}</td>" in text
    assert "<script" not in text.lower()  # the error stays text: no live script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
