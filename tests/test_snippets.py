"""Every runnable snippet in README.md and docs/ runs as written.

A fenced block runs when the line right before its fence is ``<!-- run -->``
(docs/contributing.md says so). A ``sh`` block runs under ``bash -euo pipefail``,
a ``python`` block under this venv's python, a ``yaml`` block is a config that
`mq init --print-sql` must load (its keys, types and values), each in a fresh copy of the
repository (the files git knows, as a fresh clone has them) with ``.venv``
linked to this venv and first on ``PATH``, and ``HOME`` and the XDG directories
inside the copy: mq's default SQLite database is new for every block, and no
``MQ_*`` variable leaks in. Blocks that cannot run here (cron, systemd, a
server of yours) are simply not marked. The GRANT blocks
(``<!-- least-privilege: ... -->``) run against MariaDB and PostgreSQL in
tests/test_privileges.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
MARKER = "<!-- run -->"
BLOCK = re.compile(r"^" + re.escape(MARKER) + r"\n```(\w+)\n(.*?)\n```$", re.M | re.S)
#: fewer than this many runnable blocks means a marker went missing or was misspelt
AT_LEAST = 13


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks() -> list[tuple[str, str, str]]:
    """(where, language, code) of every marked block."""
    found = []
    for page in pages():
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            where = f"{page.relative_to(ROOT)}:{line}"
            found.append((where, match.group(1), match.group(2) + "\n"))
    return found


BLOCKS = blocks()


def test_every_marker_marks_a_block_that_runs():
    """A misspelt or misplaced marker would silently leave a snippet untested."""
    assert len(BLOCKS) >= AT_LEAST, f"only {len(BLOCKS)} runnable blocks found"
    for page in pages():
        text = page.read_text()
        near = re.findall(r"^[ \t]*<!--[ \t]*run\b.*$", text, re.M)  # a marker is a line of its own
        assert all(m == MARKER for m in near), (page, near)
        assert len(near) == len(BLOCK.findall(text)), f"{page}: a marker not right before a fence"
    assert {language for _, language, _ in BLOCKS} <= {"sh", "python", "yaml"}
    readme = [where for where, _, _ in BLOCKS if where.startswith("README.md")]
    assert readme, "the README's tour is marked"


def test_the_grant_blocks_are_there_for_test_privileges():
    text = (ROOT / "docs" / "databases" / "privileges.md").read_text()
    for kind in ("mysql", "postgres"):
        for when in ("before", "after"):
            assert f"<!-- least-privilege: {kind}, {when} mq init -->\n```sql\n" in text


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository as a fresh clone has it (tracked and new files, nothing ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    clone = tmp_path_factory.mktemp("clone") / "mq"
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


def fresh_checkout(template: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of ``template`` with .venv linked in, and the environment a new user has."""
    work = tmp_path / "mq"
    shutil.copytree(template, work, symlinks=True)
    (work / ".venv").symlink_to(VENV)
    home = tmp_path / "home"
    runtime = tmp_path / "run"
    for directory in (home, runtime):
        directory.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "XDG_"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        HOME=str(home),
        XDG_RUNTIME_DIR=str(runtime),
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
    )
    return work, env


def run_block(language: str, code: str, template: Path, tmp_path: Path):
    work, env = fresh_checkout(template, tmp_path)
    if language == "yaml":  # a config: it must load as written
        (work / "mq.yaml").write_text(code)
        language, code = "sh", "mq init --print-sql > /dev/null"
    command = (
        ["bash", "-euo", "pipefail", "-c", code]
        if language == "sh"
        else [str(VENV / "bin" / "python"), "-c", code]
    )
    return subprocess.run(
        command, cwd=work, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("where, language, code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_snippet_runs_as_written(where, language, code, template, tmp_path):
    result = run_block(language, code, template, tmp_path)
    assert result.returncode == 0, (
        f"{where}\n{code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr


def test_the_readme_tour_does_what_it_says(template, tmp_path):
    """The tour's comments are claims: two failures waiting as delayed, one shown."""
    tour = next(code for where, _, code in BLOCKS if where.startswith("README.md"))
    assert tour.startswith(". .venv/bin/activate"), "the tour puts mq on PATH first"
    assert len(tour.splitlines()) <= 10
    result = run_block("sh", tour, template, tmp_path)
    assert result.returncode == 0, result.stderr
    out, err = result.stdout, result.stderr
    assert re.search(r"^thumbnails\s+0\s+2\s+0\s+0\s+0\s", out, re.M), out  # mq stats
    assert len(re.findall(r"^\d+\s+delayed\s", out, re.M)) == 2, out  # mq list
    assert "ValueError: not an image: /img/todo.txt" in out  # mq show
    assert err.count("thumbnail: message") == 5 and err.count("failed (attempt 1 of 10") == 2
    assert "no drain could start" not in out + err


def test_the_setup_commands_demo_runs_as_written(template, tmp_path):
    """The README's first command after its install step (the venv here is this one)."""
    readme = (ROOT / "README.md").read_text()
    setup = re.findall(r"```sh\n(.*?)\n```", readme.split("## Set up", 1)[1], re.S)[0]
    install, *rest = setup.split(" && .venv/bin/mq ", 1)
    assert install == "python3 -m venv .venv && .venv/bin/pip install -q ." and rest
    result = run_block("sh", ".venv/bin/mq " + rest[0], template, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "demo: message 1 on queue 'demo': {'hello': 'world'}" in result.stderr + result.stdout


UNITS = ROOT / "contrib" / "systemd"


def test_the_systemd_units_verify(tmp_path):
    """systemd-analyze verify where it is installed; the ExecStart is an mq command line."""
    exec_start = re.search(r"^ExecStart=(.*)$", (UNITS / "mq-drain.service").read_text(), re.M)
    assert exec_start
    program, *args = exec_start.group(1).split()
    assert program == "/opt/mq/bin/mq"
    mq = VENV / "bin" / "mq"
    helped = subprocess.run([str(mq), *args, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "Usage: mq drain" in helped.stdout, helped.stderr
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed; the ExecStart was checked")
    for unit in ("mq-drain.service", "mq-drain.timer"):
        text = (UNITS / unit).read_text().replace("/opt/mq/bin/mq", str(mq))
        (tmp_path / unit).write_text(text)
    result = subprocess.run(
        [verify, "verify", str(tmp_path / "mq-drain.service"), str(tmp_path / "mq-drain.timer")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    problems = [line for line in result.stderr.splitlines() if "mq-drain" in line]
    assert result.returncode == 0 and not problems, result.stderr
