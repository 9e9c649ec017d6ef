"""The -wal and -shm files of a SQLite database deleted while mq runs.

SQLite goes on writing into the WAL file it opened, now unlinked and seen by
no other process: every later commit would be lost though reported as done.
mq notices before and after each write transaction and stops (exit 3).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

import mq_cli
from mq_cli.core.errors import DatabaseError
from tests.faults.harness import wait_for


def delete_wal(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        os.unlink(f"{path}{suffix}")


def stored_ids(path: Path) -> set[int]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM mq_messages")}
    finally:
        conn.close()


@pytest.mark.parametrize("which", ["-wal", "-shm", "both"])
def test_the_api_refuses_to_write_once_the_wal_is_gone(sqlite_db, which):
    path = sqlite_db.tmp / "mq.db"
    with mq_cli.connect(database=sqlite_db.url) as mq:
        first = mq.enqueue("q", {"n": 1})
        for suffix in ("-wal", "-shm") if which == "both" else (which,):
            os.unlink(f"{path}{suffix}")
        with pytest.raises(DatabaseError, match="never delete them while mq runs"):
            mq.enqueue("q", {"n": 2})
        with pytest.raises(DatabaseError, match="deleted or replaced"):
            mq.delete([first])
    assert stored_ids(path) == {first}


def test_a_producer_stops_with_exit_3_and_every_printed_id_is_stored(sqlite_db):
    path = sqlite_db.tmp / "mq.db"
    assert sqlite_db.run("init").exit_code == 0
    producer = sqlite_db.spawn("enqueue", "-q", "q", "--lines", stdin=subprocess.PIPE)
    assert producer.stdin is not None and producer.stdout is not None
    batch = b"".join(b'{"n": %d}\n' % n for n in range(1000))  # one transaction
    producer.stdin.write(batch)
    producer.stdin.flush()
    printed = [int(producer.stdout.readline()) for _ in range(1000)]
    delete_wal(path)
    try:
        producer.stdin.write(batch)
        producer.stdin.close()
    except BrokenPipeError:
        pass
    producer.wait(timeout=60)
    out, err = producer.stdout.read(), producer.stderr.read()
    producer.stdout.close()
    producer.stderr.close()
    printed += [int(i) for i in out.split()]
    assert producer.returncode == 3, err
    text = err.decode()
    assert "-wal was deleted or replaced" in text and "never delete" in text
    assert "Traceback" not in text and len(text.strip().splitlines()) <= 3
    assert len(printed) == 1000  # nothing acknowledged after the files were gone
    assert set(printed) <= stored_ids(path)


def test_a_drain_stops_with_exit_3_when_the_wal_goes(sqlite_db, tmp_path):
    path = tmp_path / "mq.db"
    assert sqlite_db.run("init").exit_code == 0
    assert sqlite_db.run("enqueue", "-q", "q", *['{"sleep": 0.3}'] * 10).exit_code == 0
    drain = sqlite_db.spawn("drain", "-q", "q", "--handler", "tests.handlers:sleeps")
    # The files exist only while a connection is open (the enqueue's last close removed
    # them): wait until the drain has them open and has acknowledged a message, with
    # more to write after the unlink. A fixed 1 s sleep raced the drain's start on a
    # loaded machine (FileNotFoundError: the drain had not opened the database yet).
    wait_for(
        lambda: (
            all(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-shm"))
            and len(stored_ids(path)) < 10
        ),
        timeout=60,
        every=0.02,
    )
    delete_wal(path)
    out, err = drain.communicate(timeout=60)
    assert drain.returncode == 3, err
    assert b"never delete" in err and b"Traceback" not in err
