"""A connection lost after the server committed a statement and before its
reply reached the drain: the drain cannot know whether it happened. A proxy
that forwards one chosen statement, swallows the server's answer and then
drops the connection makes that moment exact."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from mq_cli.core.dburl import parse_database_url
from tests.faults.history import read

pytestmark = pytest.mark.slow


class ReplyEater:
    """Forwards 127.0.0.1:<port> to ``target``. The first client packet holding
    every part of ``trigger`` is forwarded, the server's reply is swallowed, and after
    ``settle`` seconds (the server has committed) the connection is dropped."""

    def __init__(self, target: tuple[str, int], *trigger: bytes, settle: float = 0.3):
        self.target = target
        self.trigger = trigger
        self.settle = settle
        self.armed = True
        self.fired = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                return
            server.settimeout(None)
            muted = threading.Event()
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self._up, args=(client, server, muted), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, muted), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, muted: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                fire = False
                with self.lock:
                    if self.armed and all(part in data for part in self.trigger):
                        self.armed = False
                        self.fired += 1
                        fire = True
                if fire:
                    muted.set()  # the answer to this statement never arrives
                server.sendall(data)
                if fire:
                    time.sleep(self.settle)
                    break
        except OSError:
            pass
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _down(self, server: socket.socket, client: socket.socket, muted: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if not muted.is_set():
                    client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.close()
                except OSError:
                    pass


@pytest.fixture
def setup(fault_mysql, tmp_path):
    db = fault_mysql
    (tmp_path / "mq.yaml").write_text(
        f"lock_dir: {tmp_path / 'locks'}\n"
        "queues:\n  jobs: {handler: 'tests.faults.jobs:slow', batch_size: 3, stalled_after: 1h}\n"
    )
    for n in range(3):
        assert db.run("enqueue", "-q", "jobs", json.dumps({"k": f"m{n}"})).exit_code == 0
    history = tmp_path / "history.jsonl"
    return db, history


def drain_through(db, history, proxy: ReplyEater) -> tuple[dict, str]:
    s = parse_database_url(db.url)
    url = f"mysql://{s.user or 'root'}@127.0.0.1:{proxy.port}/{s.database}"
    drain = db.spawn(
        "drain",
        "-q",
        "jobs",
        "--json",
        env=db.env(MQ_DATABASE_URL=url, MQ_FAULT_HISTORY=str(history)),
    )
    out, err = drain.communicate(timeout=90)
    assert drain.returncode == 0, err
    assert proxy.fired == 1
    return json.loads(out), err.decode()


def statuses(db) -> dict:
    return dict(db.sql("SELECT status, COUNT(*) FROM mq_messages GROUP BY status"))


def test_a_claim_whose_commit_reply_is_lost_leaves_nothing_behind(setup):
    db, history = setup
    proxy = ReplyEater(_target(db), b"\x03COMMIT")
    try:
        report, err = drain_through(db, history, proxy)
    finally:
        proxy.close()
    assert "reconnecting" in err
    # The drain exits 0 and believes the queue empty. What it claimed first must
    # have run, or be ready again; not wait an hour for gc.
    assert statuses(db) == {}, (statuses(db), report)
    assert sorted(r["msg"] for r in read(history) if r["event"] == "success") == ["m0", "m1", "m2"]


def test_an_ack_whose_reply_is_lost_is_not_reported_as_lost(setup):
    db, history = setup
    proxy = ReplyEater(_target(db), b"\x03DELETE FROM", b"WHERE id = ")  # not purge_tombstones
    try:
        report, err = drain_through(db, history, proxy)
    finally:
        proxy.close()
    # what happened is right: every message ran once and is gone
    assert statuses(db) == {}
    assert sorted(r["msg"] for r in read(history) if r["event"] == "success") == ["m0", "m1", "m2"]
    assert report["succeeded"] == 3
    # what the drain says about it is not
    assert "not recorded" not in err, err
    assert report["lost"] == 0


def _target(db) -> tuple[str, int]:
    s = parse_database_url(db.url)
    return s.host, s.port
