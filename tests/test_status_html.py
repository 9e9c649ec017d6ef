"""`mq status --html FILE`: one self-contained page, every stored text escaped, that an
operator reads at a glance (it reloads itself, each queue has a health colour and word
with the commands that repair it, step plots up to now with labelled axes), rendered in
headless Chromium (installed by tests/chromium.sh; under CI=true its absence fails the test)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from mq_cli.ops import page as status_page
from mq_cli.ops import plots
from tests.conftest import IN_CI, Db

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
    return len(png_pixels(data))


def png_pixels(data: bytes) -> set[bytes]:
    """The RGB values of a sample of an 8-bit RGB or RGBA PNG's pixels (every fourth
    row, every other pixel), its data unfiltered."""
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
            seen.update(bytes(line[i : i + 3]) for i in range(0, stride, size * 2))
    return seen


HEALTH_CONFIG = """\
defaults: {max_errors: 1}
queues:
  mail: {handler: "tests.handlers:raises"}
  stuck: {handler: "tests.handlers:sleeps", max_errors: 5}
  held: {handler: "tests.handlers:sleeps"}
  late: {handler: "tests.handlers:sleeps"}
  fine: {handler: "tests.handlers:sleeps"}
"""


def make_health_page(db: Db, tmp_path: Path, *args: str) -> tuple[str, dict[str, int]]:
    """A page with a queue of each health: mail has a failed message, stuck a stalled
    one (its drain gone 2 h ago), held is paused, late's oldest ready message waited
    10 minutes, fine is well. Returns the page and the message ids by queue."""
    (tmp_path / "mq.yaml").write_text(HEALTH_CONFIG)
    ids = {}
    for queue, payload in [("mail", '"boom"'), ("stuck", "{}"), ("held", "{}"), ("late", "{}")]:
        result = db.run("enqueue", "-q", queue, payload)
        assert result.exit_code == 0, result.output
        ids[queue] = int(result.output.split()[0])
    assert db.run("pause", "-q", "held").exit_code == 0
    drained = db.run("drain", "-q", "mail")
    assert drained.exit_code == 0, drained.output
    gone = f"owner = 'gone-drain', heartbeat_at = {db.now_sql(-7200)}"
    db.sql(f"UPDATE mq_messages SET status = 'processing', {gone} WHERE queue = 'stuck'")  # noqa: S608
    db.sql(f"UPDATE mq_messages SET available_at = {db.now_sql(-600)} WHERE queue = 'late'")  # noqa: S608
    page = tmp_path / "index.html"
    result = db.run("status", "--html", str(page), *args)
    assert result.exit_code == 0, result.output
    return page.read_text(), ids


def queue_row(text: str, queue: str) -> tuple[str, str, str]:
    """(health colour, the queue's row, its row of problems and repairs or "")."""
    found = re.search(
        rf'<tr class="health-(\w+)" data-queue="{queue}">(.*?)</tr>(<tr class="fix[^"]*">.*?</tr>)?',
        text,
    )
    assert found, f"no row for queue {queue}"
    return found.group(1), found.group(2), found.group(3) or ""


def message_row(text: str, title: str, ident: int) -> str:
    section = text.split(f"<h2>{title}", 1)[1].split("<h2>", 1)[0]
    found = re.search(rf"<tr><td>{ident}</td>.*?</tr>", section)
    assert found, f"message {ident} is not under {title}"
    return found.group(0)


def test_each_queue_has_a_health_colour_a_word_and_its_repairs(db, tmp_path):
    text, ids = make_health_page(db, tmp_path)
    # failed: red, with the commands that look at them and run them again
    colour, row, fix = queue_row(text, "mail")
    assert colour == "red" and '<span class="badge red">problem</span>' in row
    assert "1 failed message" in fix
    for command in ("mq gc --errors -q mail", "mq retry ID", "mq gc --errors --requeue -q mail"):
        assert f"<code>{command}</code>" in fix
    failed = message_row(text, "Failed messages", ids["mail"])
    assert f"<code>mq retry {ids['mail']}</code>" in failed
    assert f"<code>mq show {ids['mail']}</code>" in failed
    # stalled: red; one at a time it is still `processing`, so retry needs --force
    colour, row, fix = queue_row(text, "stuck")
    assert colour == "red" and "problem" in row
    assert "1 stalled message" in fix and "<code>mq gc --stalled --requeue -q stuck</code>" in fix
    stalled = message_row(text, "Stalled messages", ids["stuck"])
    assert f"<code>mq retry --force {ids['stuck']}</code>" in stalled
    assert f"<code>mq show {ids['stuck']}</code>" in stalled
    assert "gone-drain" in stalled and "2h00m ago" in stalled  # its drain and heartbeat
    # paused: amber, and how to resume it
    colour, row, fix = queue_row(text, "held")
    assert colour == "amber" and '<span class="badge amber">warning</span>' in row
    assert "paused" in fix and "<code>mq resume -q held</code>" in fix
    # a backlog past BACKLOG_AGE: amber
    colour, row, fix = queue_row(text, "late")
    assert colour == "amber" and "warning" in row and "waited 10m" in fix
    assert "<code>mq drain -q late</code>" in fix
    # well: green, nothing to repair
    colour, row, fix = queue_row(text, "fine")
    assert colour == "green" and '<span class="badge green">healthy</span>' in row
    assert fix == ""
    # the command a row shows really repairs it
    assert db.run("resume", "-q", "held").exit_code == 0
    requeued = db.run("gc", "--stalled", "--requeue", "-q", "stuck")
    assert requeued.exit_code == 0, requeued.output
    again = db.run("status", "--html", str(tmp_path / "again.html"))
    assert again.exit_code == 0, again.output
    text = (tmp_path / "again.html").read_text()
    assert queue_row(text, "held")[0] == "green"
    assert queue_row(text, "stuck")[0] == "green"


def test_a_queue_no_drain_can_start_is_red_with_what_to_run(db, tmp_path):
    (tmp_path / "mq.yaml").write_text('queues:\n  bad: {handler: "tests.handlers:nosuch"}\n')
    assert db.run("init").exit_code == 0
    assert db.run("drain", "-q", "bad").exit_code == 2
    page = tmp_path / "index.html"
    assert db.run("status", "--html", str(page)).exit_code == 0
    colour, _, fix = queue_row(page.read_text(), "bad")
    assert colour == "red" and "no drain could start since" in fix
    assert "<code>mq check</code>" in fix and "<code>mq drain -q bad</code>" in fix


def test_the_page_reloads_itself_every_refresh_seconds(sqlite_db, tmp_path):
    db = sqlite_db
    assert db.run("init").exit_code == 0
    page = tmp_path / "index.html"
    assert db.run("status", "--html", str(page)).exit_code == 0
    assert '<meta http-equiv="refresh" content="60">' in page.read_text()  # the cron minute
    assert db.run("status", "--html", str(page), "--refresh", "15").exit_code == 0
    assert '<meta http-equiv="refresh" content="15">' in page.read_text()
    assert "reloads every 15s" in page.read_text()
    assert db.run("status", "--html", str(page), "--refresh", "0").exit_code == 0
    assert 'http-equiv="refresh"' not in page.read_text()
    assert "does not reload itself" in page.read_text()
    result = db.run("status", "--refresh", "15")
    assert result.exit_code == 2 and "--refresh goes with --html" in result.output
    assert db.run("status", "--html", str(page), "--refresh", "-1").exit_code == 2
    assert "--refresh SECONDS" in db.run("status", "--help").output


RIGHT_EDGE = f"H{plots.WIDTH - plots.RIGHT:.1f}"


def test_the_plots_are_step_plots_to_now_with_labelled_axes(db, tmp_path):
    text = make_page(db, tmp_path).read_text()
    svgs = re.findall(r"<svg .*?</svg>", text)
    assert len(svgs) == 4  # per queue: done and failed, backlog
    for svg in svgs:
        assert '<text class="xlabel"' in svg and ">time before now</text>" in svg
        assert re.search(r'<text class="ylabel"[^>]*>messages (per minute|\(ready\))</text>', svg)
        yticks = re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', svg)
        assert yticks[0] == "0" and float(yticks[-1]) >= 1
        xticks = re.findall(r'<text class="xtick"[^>]*>([^<]*)</text>', svg)
        assert xticks[0] == "now" and "-5 min" in xticks and "-10 min" in xticks
        paths = re.findall(r'<path class="step" d="([^"]*)"', svg)
        assert paths, svg
        for d in paths:
            assert re.fullmatch(r"M[\d.]+ [\d.]+(H[\d.]+V[\d.]+)*H[\d.]+", d), d  # no slopes
            assert d.endswith(RIGHT_EDGE), d  # the last value holds until now
    # thumbs' backlog: one message ready when the page was written, held at the top (1) to now
    figure = text.split("<figcaption>thumbs: backlog", 1)[1].split("</figure>", 1)[0]
    (d,) = re.findall(r'<path class="step" d="([^"]*)"', figure)
    assert re.search(rf"[ V]{plots.TOP:.1f}{RIGHT_EDGE}$", d), d


def test_a_step_plot_holds_each_value_until_the_next_and_the_last_until_now():
    now = 10_000.0
    svg = plots.step_plot(
        [plots.Line("done", "#00f", [(now - 3600, 2.0), (now - 1800, 2.0), (now - 900, 7.0)])],
        now - 3600, now, "messages per minute",
    )  # fmt: skip
    (d,) = re.findall(r'<path class="step" d="([^"]*)"', svg)
    left, right = plots.LEFT, plots.WIDTH - plots.RIGHT
    bottom = plots.HEIGHT - plots.BOTTOM
    x = left + 0.75 * (right - left)
    # 2 from the left edge (the same 2 again draws nothing new), 7 from -15 min, to now
    two_y, seven_y = (bottom - share * (bottom - plots.TOP) for share in (0.2, 0.7))
    assert d == f"M{left:.1f} {two_y:.1f}H{x:.1f}V{seven_y:.1f}H{right:.1f}"
    xticks = re.findall(r'<text class="xtick"[^>]*>([^<]*)</text>', svg)
    assert xticks == ["now", "-15 min", "-30 min", "-45 min", "-60 min"]
    yticks = re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', svg)
    assert yticks == ["0", "5", "10"]
    assert [plots.round_max(v) for v in (0, 1, 3, 7, 12, 0.036, 250)] == [
        1, 1, 5, 10, 20, 0.05, 500,
    ]  # fmt: skip
    assert [plots.ago(m) for m in (30, 60, 360, 2880)] == ["-30 min", "-60 min", "-6 h", "-2 d"]


def test_done_and_failed_drop_to_zero_where_nothing_was_recorded():
    counts = [(0.0, 5), (60.0, 3), (240.0, 2)]
    assert status_page._rates(counts, 60.0, 400.0) == [
        (0.0, 5.0), (60.0, 3.0), (120.0, 0.0), (240.0, 2.0), (300.0, 0.0),
    ]  # fmt: skip
    # a coarser step: its sum, per minute
    assert status_page._rates([(0.0, 30)], 300.0, 300.0) == [(0.0, 6.0)]


#: the badges' colours (page.STYLE), as a screenshot has them
BADGES = {"problem": b"\xb3\x26\x1e", "warning": b"\xf2\xb0\x1e", "healthy": b"\x2e\x7d\x32"}


def test_the_page_renders_in_headless_chromium(sqlite_db, tmp_path):
    db = sqlite_db
    assert db.run("init").exit_code == 0
    page = make_page(db, tmp_path)
    assert db.run("pause", "-q", "thumbs").exit_code == 0
    (tmp_path / "mq.yaml").write_text(CONFIG + '  fine: {handler: "tests.handlers:sleeps"}\n')
    assert db.run("status", "--html", str(page)).exit_code == 0
    url = page.resolve().as_uri()
    shot = tmp_path / "page.png"
    result = run_chromium(
        tmp_path, f"--screenshot={shot}", "--window-size=1280,900", "--force-color-profile=srgb",
        url,
    )  # fmt: skip
    assert shot.exists(), result.stderr.decode(errors="replace")[-2000:]
    data = shot.read_bytes()
    assert len(data) > 5000
    pixels = png_pixels(data)
    assert len(pixels) > 2  # text, lines and background: no blank page
    for word, colour in BADGES.items():  # each health badge is drawn, in its colour
        assert colour in pixels, f"no {word} badge to be seen"
    dom = run_chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    text = dom.stdout.decode()
    assert "<title>mq status</title>" in text
    assert '<meta http-equiv="refresh" content="60">' in text
    for name in ("mail", "thumbs", "fine"):
        assert f'data-queue="{name}"><td>{name}' in text
    for word, level, name in (("problem", "red", "mail"), ("warning", "amber", "thumbs"),
                              ("healthy", "green", "fine")):  # fmt: skip
        assert f'<span class="badge {level}">{word}</span>' in queue_row(text, name)[1]
    assert "<code>mq resume -q thumbs</code>" in text
    assert "<code>mq gc --errors -q mail</code>" in text
    assert "<script" not in text.lower()  # the error stays text: no live script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
