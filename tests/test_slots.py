"""Per-host drain slots: real flock locks held by real processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mq_cli.core.errors import ConfigError
from mq_cli.host.slots import acquire, ensure_lock_dir, inspect_lock_dir

HOLDER = textwrap.dedent(
    """
    import sys, time
    from mq_cli.host.slots import acquire
    slot = acquire(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print(slot.number if slot else "none", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def lock_dir(tmp_path: Path) -> str:
    path = tmp_path / "locks"
    ensure_lock_dir(str(path))
    return str(path)


@pytest.fixture
def holder(lock_dir: str):
    """holder(queue, concurrency) -> (a process holding a slot, the slot number it got)."""
    procs: list[subprocess.Popen] = []

    def _start(queue: str, concurrency: int) -> tuple[subprocess.Popen, str]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, lock_dir, queue, str(concurrency)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        procs.append(proc)
        return proc, proc.stdout.readline().strip()

    yield _start
    for proc in procs:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_slots_across_processes_and_kill_9(lock_dir, holder):
    proc, number = holder("mail", 1)
    assert number == "0"
    lock_file = Path(lock_dir, "mail.0.lock")
    assert lock_file.read_text() == f"{proc.pid}\n"
    assert acquire(lock_dir, "mail", 1) is None
    with acquire(lock_dir, "mail", 2) as slot:
        assert slot.number == 1
        assert slot.path == os.path.join(lock_dir, "mail.1.lock")
        assert Path(slot.path).read_text() == f"{os.getpid()}\n"
        assert acquire(lock_dir, "mail", 2) is None
    assert lock_file.read_text() == f"{proc.pid}\n"  # a busy try left the holder's pid alone
    proc.kill()
    proc.wait()
    slot = acquire(lock_dir, "mail", 1)
    assert slot is not None and slot.number == 0
    slot.release()


def test_queues_do_not_share_slots(lock_dir, holder):
    holder("mail", 1)
    slot = acquire(lock_dir, "thumbnails", 1)
    assert slot is not None and slot.number == 0
    slot.release()


def test_release_frees_the_slot_and_clears_the_pid(lock_dir):
    first = acquire(lock_dir, "q", 1)
    assert acquire(lock_dir, "q", 1) is None
    first.release()
    first.release()  # twice is harmless
    assert Path(first.path).read_text() == ""
    assert Path(first.path).exists()  # never deleted: see mq_cli/host/slots.py
    again = acquire(lock_dir, "q", 1)
    assert again is not None
    again.release()


def test_children_do_not_inherit_the_lock(lock_dir):
    # A handler that leaves a daemon behind must not keep the slot busy.
    slot = acquire(lock_dir, "q", 1)
    child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        slot.release()
        again = acquire(lock_dir, "q", 1)
        assert again is not None
        again.release()
    finally:
        child.kill()
        child.wait()


def test_lock_dir_created_0700_with_parents(tmp_path):
    path = tmp_path / "a" / "b" / "locks"
    old = os.umask(0)
    try:
        ensure_lock_dir(str(path))
    finally:
        os.umask(old)
    for directory in (path, path.parent, path.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    ensure_lock_dir(str(path))  # an existing good one is fine


def test_acquire_creates_the_lock_dir(tmp_path):
    path = tmp_path / "fresh"
    slot = acquire(str(path), "q", 1)
    assert slot is not None and stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(slot.path).st_mode) == 0o600
    slot.release()


def test_relative_lock_dir(tmp_path):
    # conftest runs every test in tmp_path
    slot = acquire("relative/locks", "q", 1)
    assert slot is not None
    assert (tmp_path / "relative" / "locks" / "q.0.lock").exists()
    slot.release()


def test_a_0755_lock_dir_is_accepted(tmp_path):
    path = tmp_path / "readable"
    path.mkdir()
    path.chmod(0o755)
    ensure_lock_dir(str(path))


@pytest.mark.parametrize("mode", [0o770, 0o702, 0o777])
def test_writable_by_others_is_refused(tmp_path, mode):
    path = tmp_path / "open"
    path.mkdir()
    path.chmod(mode)
    with pytest.raises(ConfigError, match=r"writable by group or others.*chmod 700"):
        ensure_lock_dir(str(path))
    with pytest.raises(ConfigError):
        acquire(str(path), "q", 1)


def test_symlinked_lock_dir_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="symlink"):
        ensure_lock_dir(str(link))
    with pytest.raises(ConfigError, match="symlink"):
        acquire(str(link), "q", 1)
    assert list(real.iterdir()) == []


def test_symlinked_lock_file_is_refused_not_followed(lock_dir, tmp_path):
    victim = tmp_path / "victim"
    Path(lock_dir, "q.0.lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="symlink"):
        acquire(lock_dir, "q", 1)
    assert not victim.exists()
    victim.write_text("precious")
    with pytest.raises(ConfigError, match="symlink"):
        acquire(lock_dir, "q", 1)
    assert victim.read_text() == "precious"


def test_lock_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        ensure_lock_dir(str(path))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_lock_dir_of_another_user_is_refused(tmp_path):
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    os.chown(path, 12345, -1)
    with pytest.raises(ConfigError, match="belongs to uid 12345"):
        ensure_lock_dir(str(path))


def test_lock_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create lock_dir"):
        ensure_lock_dir(str(blocker / "locks"))


def test_inspecting_a_lock_dir_creates_nothing(tmp_path):
    path = tmp_path / "a" / "locks"
    assert inspect_lock_dir(str(path)) is False  # missing, and the first drain can make it
    assert not (tmp_path / "a").exists()
    ensure_lock_dir(str(path))
    assert inspect_lock_dir(str(path)) is True


def test_inspecting_says_what_ensuring_would(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create lock_dir .*is not a directory"):
        inspect_lock_dir(str(blocker / "locks"))
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        inspect_lock_dir(str(open_dir))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_inspecting_a_lock_dir_under_a_read_only_parent(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o500)
    with pytest.raises(ConfigError, match="cannot create lock_dir .*not writable"):
        inspect_lock_dir(str(parent / "locks"))


@pytest.mark.parametrize("queue", ["../etc", "a/b", "", "x" * 65])
def test_bad_queue_names(lock_dir, queue):
    with pytest.raises(ConfigError, match="queue name"):
        acquire(lock_dir, queue, 1)


def test_concurrency_must_be_positive(lock_dir):
    with pytest.raises(ConfigError, match="at least 1"):
        acquire(lock_dir, "q", 0)


def test_the_default_lock_dir_is_per_user_and_never_in_tmp(tmp_path, monkeypatch):
    from mq_cli.core.config import default_lock_dir, load_config

    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert load_config().lock_dir == str(runtime / "mq")
    # cron sets no XDG_RUNTIME_DIR (and one that does not exist counts as none)
    for value in (None, str(tmp_path / "gone")):
        if value is None:
            monkeypatch.delenv("XDG_RUNTIME_DIR")
        else:
            monkeypatch.setenv("XDG_RUNTIME_DIR", value)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        assert default_lock_dir() == str(tmp_path / "state" / "mq" / "locks")
        monkeypatch.delenv("XDG_STATE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert default_lock_dir() == str(tmp_path / "home" / ".local" / "state" / "mq" / "locks")
        assert not default_lock_dir().startswith("/tmp/mq-")
    slot = acquire(default_lock_dir(), "q", 1)
    assert slot is not None
    slot.release()
    for part in ("home/.local/state", "home/.local/state/mq", "home/.local/state/mq/locks"):
        assert stat.S_IMODE((tmp_path / part).stat().st_mode) == 0o700, part
