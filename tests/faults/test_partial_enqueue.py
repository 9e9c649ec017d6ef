"""A multi-batch enqueue that fails part way reports the whole command.

`mq enqueue --lines` of five batches (``produce.BATCH_MESSAGES`` lines each); the
third batch's COMMIT never reaches the server (MariaDB, PostgreSQL: a proxy cuts
the connection at it, on every try), or the database refuses the batch (SQLite,
which has no connection to cut: a trigger stands in for a full disk). What mq
says must be what the table holds: how many were stored and their ids (on
stdout, and on stderr with --silent), which lines it cannot vouch for, and from
which line on nothing was stored; enqueueing again what it says was not stored
(and, after a look, what it could not vouch for) gives every line once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from mq_cli.ops.produce import BATCH_MESSAGES
from tests.conftest import Db
from tests.faults.test_ambiguous_enqueue import _target, _through
from tests.proxy import Proxy

pytestmark = pytest.mark.slow

TOTAL = 5 * BATCH_MESSAGES
CUT = 2 * BATCH_MESSAGES + 1  # the first line of the third batch


def _lines(numbers: range | list[int]) -> bytes:
    return b"".join(b'{"n": %d}\n' % n for n in numbers)


def _ids(text: str) -> set[int]:
    """``1-1000, 2001-2500`` as a set."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


@dataclass
class Said:
    """What mq's error says of the whole command."""

    stored: int
    ids: set[int]
    unknown: range  # lines it cannot vouch for
    not_stored_from: int  # the first line surely not stored


def _said(stderr: str) -> Said:
    text = " ".join(stderr.split())  # one line, wherever the terminal would wrap
    stored = re.search(r"(\d+) message\(s\) before line (\d+) were stored, ids ([-0-9, ]+);", text)
    assert stored, stderr
    count, ids = int(stored[1]), _ids(stored[3])
    unknown = re.search(r"line (\d+) to line (\d+) may have been stored", text)
    if unknown:
        low, high = int(unknown[1]), int(unknown[2])
        after = re.search(r"everything after line (\d+) was not", text)
        assert after and int(after[1]) == high, stderr
        return Said(count, ids, range(low, high + 1), high + 1)
    not_stored = re.search(r"line (\d+) and everything after it were not", text)
    assert not_stored and int(not_stored[1]) == int(stored[2]), stderr
    return Said(count, ids, range(0), int(not_stored[1]))


def _table(db: Db) -> dict[int, list[int]]:
    """{line: [ids]} of what the table holds."""
    held: dict[int, list[int]] = {}
    for ident, payload in db.sql("SELECT id, payload FROM mq_messages ORDER BY id"):
        held.setdefault(json.loads(bytes(payload))["n"], []).append(ident)
    return held


@pytest.fixture(params=["sqlite", "mysql", "postgres"])
def faulty(request, tmp_path):
    """(the database, the environment whose enqueue fails at the third batch, a
    function that ends the fault, how many COMMITs the proxy kept from the server)."""
    if request.param == "sqlite":
        db: Db = request.getfixturevalue("sqlite_db")
        assert db.run("init").exit_code == 0
        # abs() of the smallest integer is an error SQLite raises (SQLITE_ERROR),
        # as it would a full disk or an I/O error: the batch is rolled back.
        db.sql(
            "CREATE TRIGGER full_disk BEFORE INSERT ON mq_messages "
            f"WHEN NEW.payload = CAST('{{\"n\": {CUT}}}' AS BLOB) "
            "BEGIN SELECT abs(-9223372036854775808); END"
        )
        yield db, {}, lambda: db.sql("DROP TRIGGER full_disk"), lambda: 1
        return
    db = request.getfixturevalue("fault_mysql" if request.param == "mysql" else "fault_pg")
    proxy = Proxy(_target(db))
    line = b": %d}" % CUT
    proxy.drop_commits_after(line, line.hex().encode())  # text, or bytea's hex
    try:
        yield db, {"MQ_DATABASE_URL": _through(db, proxy.port)}, proxy.close, lambda: proxy.dropped
    finally:
        proxy.close()


@pytest.mark.parametrize("silent", [True, False], ids=["silent", "ids-printed"])
def test_an_enqueue_cut_at_its_third_batch_says_what_was_stored(faulty, silent):
    db, env, repair, dropped = faulty
    flags = ["--silent"] if silent else []
    result = db.run(
        "enqueue", "-q", "jobs", "--lines", *flags, input=_lines(range(1, TOTAL + 1)), env=env
    )
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert dropped() >= 1
    # Two batches were stored: no sentence may say otherwise.
    assert "nothing was stored" not in result.stderr, result.stderr
    said = _said(result.stderr)
    held = _table(db)
    assert said.stored == 2 * BATCH_MESSAGES
    assert said.stored == sum(map(len, held.values()))
    assert said.ids == {i for ids in held.values() for i in ids}
    assert sorted(held) == list(range(1, CUT))  # the first two batches, each line once
    printed = [int(x) for x in result.stdout.split()]
    assert printed == ([] if silent else sorted(said.ids))
    assert said.not_stored_from >= CUT and said.not_stored_from - CUT < BATCH_MESSAGES + 1
    assert not set(held) & set(said.unknown)  # nothing mq could not vouch for was stored here

    # The user does what the message says: enqueues again from the line it names on,
    # and (after a look) the lines it could not vouch for that the table lacks.
    repair()
    again = [n for n in said.unknown if n not in held] + list(
        range(said.not_stored_from, TOTAL + 1)
    )
    retry = db.run("enqueue", "-q", "jobs", "--lines", "--silent", input=_lines(again))
    assert retry.exit_code == 0, retry.output
    held = _table(db)
    assert sorted(held) == list(range(1, TOTAL + 1))
    assert {n for n, ids in held.items() if len(ids) != 1} == set()  # each line once


@pytest.mark.parametrize("kind", ["mysql", "postgres"])
def test_an_enqueue_whose_server_goes_at_the_third_commit_says_what_it_cannot_vouch_for(
    kind, request
):
    """The third batch's COMMIT is dropped and the server is gone from then on: not
    even PostgreSQL's commit log can be asked, so that batch is in doubt (exit 3),
    and what came before and after it is said as surely as above."""
    db: Db = request.getfixturevalue("fault_mysql" if kind == "mysql" else "fault_pg")
    proxy = Proxy(_target(db))
    line = b": %d}" % CUT
    proxy.drop_commits_after(line, line.hex().encode(), then_down=True)
    try:
        env = {"MQ_DATABASE_URL": _through(db, proxy.port)}
        result = db.run(
            "enqueue",
            "-q",
            "jobs",
            "--lines",
            "--silent",
            input=_lines(range(1, TOTAL + 1)),
            env=env,
        )
    finally:
        proxy.close()
    assert result.exit_code == 3 and proxy.dropped == 1, result.output
    assert "Traceback" not in result.output and "nothing was stored" not in result.stderr
    said = _said(result.stderr)
    held = _table(db)
    assert said.stored == sum(map(len, held.values())) == 2 * BATCH_MESSAGES
    assert said.ids == {i for ids in held.values() for i in ids}
    assert said.unknown == range(CUT, CUT + BATCH_MESSAGES), result.stderr
    assert "look (`mq list -q jobs`)" in result.stderr  # no key: no retry advised blindly
    again = [n for n in said.unknown if n not in held] + list(
        range(said.not_stored_from, TOTAL + 1)
    )
    assert (
        db.run("enqueue", "-q", "jobs", "--lines", "--silent", input=_lines(again)).exit_code == 0
    )
    held = _table(db)
    assert sorted(held) == list(range(1, TOTAL + 1))
    assert {n for n, ids in held.items() if len(ids) != 1} == set()
