"""`mq enqueue`, on a fresh SQLite file and a fresh MariaDB database (the `db` fixture).

Every test checks what the user sees (exit code, stdout ids, stderr message)
and what the table really holds.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

import mq_cli
from mq_cli.core.errors import PayloadTooLarge


def ids_of(result) -> list[int]:
    return [int(line) for line in result.stdout.splitlines()]


def stored(db, queue: str = "q") -> list[tuple[int, bytes]]:
    """(id, payload) of the queue's rows, by id."""
    rows = db.sql("SELECT id, payload FROM mq_messages WHERE queue = %s ORDER BY id", (queue,))
    return [(int(i), bytes(p)) for i, p in rows]


def count(db, queue: str | None = None) -> int:
    if queue is None:
        return int(db.sql("SELECT COUNT(*) FROM mq_messages")[0][0])
    return int(db.sql("SELECT COUNT(*) FROM mq_messages WHERE queue = %s", (queue,))[0][0])


def config_with_formats(db) -> dict:
    """Env for db.run with a config naming a text queue and a bytes queue."""
    path = db.tmp / "formats.yaml"
    path.write_text("queues:\n  notes:\n    format: text\n  blobs:\n    format: bytes\n")
    return {"MQ_CONFIG": str(path)}


def as_datetime(value) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


# -- PAYLOAD arguments --------------------------------------------------------


def test_each_argument_is_one_message(db):
    result = db.run("enqueue", "-q", "q", '{"a": 1}', "[2, 3]", '"x"')
    assert result.exit_code == 0, result.output
    ids = ids_of(result)
    assert len(ids) == 3 and len(set(ids)) == 3
    assert stored(db) == [(ids[0], b'{"a": 1}'), (ids[1], b"[2, 3]"), (ids[2], b'"x"')]
    assert result.stderr == ""


def test_one_bad_argument_rejects_them_all(db):
    result = db.run("enqueue", "-q", "q", '{"a": 1}', "{nope", "[3]")
    # Contract: "one bad argument rejects them all", with exit 1 (input rejected),
    # the same code as the same bad JSON piped on stdin.
    assert result.exit_code == 1, result.output
    assert "argument 2" in result.stderr
    assert "invalid JSON" in result.stderr
    assert "nothing was stored" in result.stderr
    assert result.stdout == ""
    assert count(db) == 0
    assert "Traceback" not in result.output


def test_nan_is_not_json(db):
    result = db.run("enqueue", "-q", "q", "[1, NaN]")
    assert result.exit_code == 1
    assert count(db) == 0


def test_payload_arguments_and_stdin_modes_exclude_each_other(db):
    assert db.run("enqueue", "-q", "q", "--lines", "{}", input="{}\n").exit_code == 2
    assert db.run("enqueue", "-q", "q", "--lines", "-0", input="{}\n").exit_code == 2
    assert db.run("enqueue", "{}").exit_code == 2  # -q is required
    assert count(db) == 0


# -- stdin --------------------------------------------------------------------


class Terminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_no_payload_and_stdin_a_terminal_is_a_usage_error(db):
    result = db.run("enqueue", "-q", "q", input=Terminal(b'{"typed": 1}\n'))
    assert result.exit_code == 2, result.output
    assert "PAYLOAD" in result.stderr
    assert count(db) == 0


def test_stdin_whole_is_one_message(db):
    doc = b'{\n  "a": 1,\n\n  "b": [1, 2]\n}\n'
    result = db.run("enqueue", "-q", "q", input=doc)
    assert result.exit_code == 0, result.output
    (new_id,) = ids_of(result)
    assert stored(db) == [(new_id, doc)]


def test_stdin_lines_skip_blank_lines_and_strip_crlf(db):
    text = b'{"n": 1}\r\n\r\n   \n{"n": 2}\n\n{"n": 3}'  # no final newline
    result = db.run("enqueue", "-q", "q", "--lines", input=text)
    assert result.exit_code == 0, result.output
    ids = ids_of(result)
    assert stored(db) == [(ids[0], b'{"n": 1}'), (ids[1], b'{"n": 2}'), (ids[2], b'{"n": 3}')]


def test_stdin_lines_empty_input_stores_nothing(db):
    result = db.run("enqueue", "-q", "q", "-l", input=b"\n\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert count(db) == 0


def test_stdin_nul_separated(db):
    env = config_with_formats(db)
    result = db.run("enqueue", "-q", "notes", "-0", input=b"one\0two\nlines\0\0three", env=env)
    assert result.exit_code == 0, result.output
    ids = ids_of(result)
    assert stored(db, "notes") == [(ids[0], b"one"), (ids[1], b"two\nlines"), (ids[2], b"three")]


def test_empty_stdin_for_a_json_queue_is_rejected(db):
    result = db.run("enqueue", "-q", "q", input=b"")
    assert result.exit_code == 1, result.output
    assert "stdin" in result.stderr and "empty" in result.stderr
    assert result.stdout == ""
    assert count(db) == 0


def test_invalid_json_on_line_n(db):
    text = '{"n": 1}\n{"n": 2}\n{"n": 3\n{"n": 4}\n{"n": 5}\n'
    result = db.run("enqueue", "-q", "q", "--lines", input=text)
    assert result.exit_code == 1, result.output
    assert "line 3" in result.stderr
    assert "invalid JSON" in result.stderr
    assert "Traceback" not in result.output
    ids = ids_of(result)
    assert stored(db) == [(ids[0], b'{"n": 1}'), (ids[1], b'{"n": 2}')]


@pytest.mark.parametrize("depth", [985, 100_000])
def test_too_deeply_nested_json_is_a_rejected_line(db, depth):
    deep = "[" * depth + "]" * depth
    text = f'{{"n": 1}}\n{{"n": 2}}\n{deep}\n{{"n": 4}}\n'
    result = db.run("enqueue", "-q", "q", "--lines", input=text)
    assert result.exit_code == 1, result.output
    assert "line 3: too deeply nested" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.output
    ids = ids_of(result)
    assert stored(db) == [(ids[0], b'{"n": 1}'), (ids[1], b'{"n": 2}')]
    # one argument, and the whole of stdin, the same way
    for args, given in ((["enqueue", "-q", "q", deep], None), (["enqueue", "-q", "q"], deep)):
        result = db.run(*args, input=given)
        assert result.exit_code == 1, result.output
        assert "too deeply nested" in result.stderr
    assert count(db) == 2


def test_invalid_json_line_number_counts_blank_lines(db):
    result = db.run("enqueue", "-q", "q", "--lines", input='{"n": 1}\n\n\nnope\n{"n": 5}\n')
    assert result.exit_code == 1
    assert "line 4" in result.stderr
    assert count(db) == 1


def test_invalid_json_on_line_1_stores_nothing(db):
    result = db.run("enqueue", "-q", "q", "--lines", input="nope\n{}\n")
    assert result.exit_code == 1
    assert "line 1" in result.stderr
    assert result.stdout == ""
    assert count(db) == 0


def test_rejection_after_several_batches_keeps_what_came_before(db):
    lines = [json.dumps({"n": n}) for n in range(1, 2500)] + ["{broken", '{"n": 2501}']
    result = db.run("enqueue", "-q", "q", "--lines", input="\n".join(lines) + "\n")
    assert result.exit_code == 1
    assert "line 2500" in result.stderr
    ids = ids_of(result)
    assert len(ids) == 2499
    rows = stored(db)
    assert [i for i, _ in rows] == ids
    assert [json.loads(p)["n"] for _, p in rows] == list(range(1, 2500))


# -- formats ------------------------------------------------------------------


def test_text_queue_rejects_invalid_utf8(db):
    env = config_with_formats(db)
    result = db.run("enqueue", "-q", "notes", input=b"caf\xe9", env=env)
    assert result.exit_code == 1, result.output
    assert "UTF-8" in result.stderr
    assert count(db) == 0
    result = db.run("enqueue", "-q", "notes", "--lines", input=b"ok\nbad \xff\nlater\n", env=env)
    assert result.exit_code == 1
    assert "line 2" in result.stderr
    assert [p for _, p in stored(db, "notes")] == [b"ok"]


def test_text_queue_takes_any_text(db):
    env = config_with_formats(db)
    result = db.run("enqueue", "-q", "notes", "not json", "café ☕", env=env)
    assert result.exit_code == 0, result.output
    assert [p for _, p in stored(db, "notes")] == [b"not json", "café ☕".encode()]


def test_bytes_queue_round_trips_every_byte_value(db):
    env = config_with_formats(db)
    data = bytes(range(256)) * 4 + b"\r\n\0\0\\'\"\x1a"
    result = db.run("enqueue", "-q", "blobs", input=data, env=env)
    assert result.exit_code == 0, result.output
    (new_id,) = ids_of(result)
    assert stored(db, "blobs") == [(new_id, data)]


def test_bytes_queue_lines_round_trip(db):
    env = config_with_formats(db)
    lines = [bytes(range(1, 10)), bytes(range(128, 256)), b"\x00\x0b\x0c"]
    result = db.run("enqueue", "-q", "blobs", "-l", input=b"\n".join(lines) + b"\n", env=env)
    assert result.exit_code == 0, result.output
    assert [p for _, p in stored(db, "blobs")] == lines


# -- options ------------------------------------------------------------------


def test_delay_stores_a_future_available_at_and_counts_as_delayed(db):
    result = db.run("enqueue", "-q", "q", "--delay", "1h", "{}")
    assert result.exit_code == 0, result.output
    (new_id,) = ids_of(result)
    ((created, available),) = db.sql(
        "SELECT created_at, available_at FROM mq_messages WHERE id = %s", (new_id,)
    )
    waited = (as_datetime(available) - as_datetime(created)).total_seconds()
    assert 3599 <= waited <= 3601

    stats = json.loads(db.run("stats", "--json").stdout)
    assert stats["q"]["delayed"] == 1
    assert stats["q"]["ready"] == 0
    assert stats["q"]["oldest_ready_seconds"] is None


@pytest.mark.parametrize("delay", ["5x", "-1", "30m1h", "soon", "36501d"])
def test_bad_delay_is_exit_2(db, delay: str):
    result = db.run("enqueue", "-q", "q", "--delay", delay, "{}")
    assert result.exit_code == 2, result.output
    assert "--delay" in result.stderr
    assert count(db) == 0


def test_priority_is_stored(db):
    high = ids_of(db.run("enqueue", "-q", "q", "--priority", "5", "{}"))[0]
    low = ids_of(db.run("enqueue", "-q", "q", "--priority", "-3", "{}"))[0]
    plain = ids_of(db.run("enqueue", "-q", "q", "{}"))[0]
    rows = dict(db.sql("SELECT id, priority FROM mq_messages"))
    assert {int(k): int(v) for k, v in rows.items()} == {high: 5, low: -3, plain: 0}


@pytest.mark.parametrize("priority", ["high", "1.5", str(2**31), str(-(2**31) - 1)])
def test_bad_priority_is_exit_2(db, priority: str):
    result = db.run("enqueue", "-q", "q", "--priority", priority, "{}")
    assert result.exit_code == 2, result.output
    assert count(db) == 0


def test_unique_key_skips_the_second_enqueue(db):
    first = db.run("enqueue", "-q", "q", "--unique-key", "daily-1", '{"n": 1}')
    assert first.exit_code == 0, first.output
    (first_id,) = ids_of(first)

    second = db.run("enqueue", "-q", "q", "--unique-key", "daily-1", '{"n": 2}')
    assert second.exit_code == 0, second.output
    assert second.stdout == ""
    assert "skipped" in second.stderr and "daily-1" in second.stderr
    assert stored(db) == [(first_id, b'{"n": 1}')]

    # The same key on another queue is another message.
    other = db.run("enqueue", "-q", "other", "--unique-key", "daily-1", "{}")
    assert other.exit_code == 0
    assert len(ids_of(other)) == 1
    # And another key on the same queue too.
    assert len(ids_of(db.run("enqueue", "-q", "q", "--unique-key", "daily-2", "{}"))) == 1
    assert count(db) == 3


def test_unique_keys_differing_in_trailing_space_are_different_keys(db, request):
    first = db.run("enqueue", "-q", "q", "--unique-key", "k", "[1]")
    second = db.run("enqueue", "-q", "q", "--unique-key", "k ", "[2]")
    assert first.exit_code == second.exit_code == 0
    assert len(ids_of(first)) == 1
    assert len(ids_of(second)) == 1, second.stderr
    assert count(db) == 2


def test_unique_key_with_several_payloads_stores_the_first(db):
    result = db.run("enqueue", "-q", "q", "--unique-key", "k", "[1]", "[2]", "[3]")
    assert result.exit_code == 0, result.output
    (new_id,) = ids_of(result)
    assert stored(db) == [(new_id, b"[1]")]
    assert "skipped 2" in result.stderr


@pytest.mark.parametrize("key", ["", "k" * 256])
def test_bad_unique_key_is_exit_2(db, key: str):
    result = db.run("enqueue", "-q", "q", "--unique-key", key, "{}")
    assert result.exit_code == 2, result.output
    assert count(db) == 0


def test_silent_prints_nothing_but_stores(db):
    result = db.run("enqueue", "-q", "q", "--silent", "--lines", input="[1]\n[2]\n")
    assert result.exit_code == 0
    assert result.stdout == "" and result.stderr == ""
    assert count(db) == 2


def test_printed_ids_match_the_table(db):
    db.run("enqueue", "-q", "other", "[0]")
    result = db.run("enqueue", "-q", "q", "-l", input="".join(f"[{n}]\n" for n in range(50)))
    assert result.exit_code == 0
    assert result.stdout.endswith("\n")
    ids = ids_of(result)
    assert ids == sorted(ids)
    assert stored(db) == [(i, f"[{n}]".encode()) for n, i in enumerate(ids)]


def test_large_input_streams_in_batches(db):
    total = 30_000
    text = "".join(f'{{"n": {n}}}\n' for n in range(total))
    result = db.run("enqueue", "-q", "bulk", "--lines", input=text)
    assert result.exit_code == 0, result.output
    ids = ids_of(result)
    assert len(ids) == total and len(set(ids)) == total
    assert count(db, "bulk") == total
    rows = db.sql("SELECT id, payload FROM mq_messages WHERE queue = 'bulk' ORDER BY id")
    assert [int(i) for i, _ in rows] == ids
    assert [json.loads(p)["n"] for _, p in rows] == list(range(total))


# -- MariaDB: payloads larger than the server accepts ---------------------------


@pytest.fixture
def mariadb(mysql_db):
    result = mysql_db.run("init")
    assert result.exit_code == 0, result.output
    return mysql_db


def max_packet(db) -> int:
    return int(db.sql("SELECT @@max_allowed_packet")[0][0])


def test_payload_larger_than_max_allowed_packet(mariadb):
    size = max_packet(mariadb) + (1 << 20)
    payload = b'"' + b"a" * size + b'"'
    for args in (["enqueue", "-q", "big"], ["enqueue", "-q", "big", "--lines"]):
        result = mariadb.run(*args, input=payload)
        assert result.exit_code == 1, result.output
        assert "larger than the database accepts" in result.stderr
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) <= 2
        assert result.stdout == ""
    assert count(mariadb) == 0
    # The server is fine afterwards.
    assert mariadb.run("enqueue", "-q", "big", "{}").exit_code == 0
    assert count(mariadb) == 1


def test_too_large_then_next_enqueue_on_the_same_api_object(mariadb):
    too_big = "a" * (max_packet(mariadb) + (1 << 20))
    with mq_cli.connect(database=mariadb.url) as mq:
        with pytest.raises(PayloadTooLarge) as caught:
            mq.enqueue("big", too_big)
        assert "max_allowed_packet" in str(caught.value) or "accepts" in str(caught.value)
        new_id = mq.enqueue("big", {"ok": True})
    ((stored_id, payload),) = stored(mariadb, "big")
    assert stored_id == new_id and json.loads(payload) == {"ok": True}


def test_payload_that_needs_escaping_is_measured_escaped(mariadb, tmp_path: Path):
    # PyMySQL sends a payload as escaped SQL text: NUL bytes take two bytes each.
    env = {"MQ_CONFIG": str(tmp_path / "b.yaml")}
    (tmp_path / "b.yaml").write_text("queues:\n  blobs:\n    format: bytes\n")
    limit = max_packet(mariadb)
    fits = b"\0" * (limit // 2 - (1 << 20))
    result = mariadb.run("enqueue", "-q", "blobs", input=fits, env=env)
    assert result.exit_code == 0, result.output
    (new_id,) = ids_of(result)
    assert stored(mariadb, "blobs") == [(new_id, fits)]

    too_big = b"\0" * (limit // 2 + (1 << 20))  # under the limit raw, over it escaped
    result = mariadb.run("enqueue", "-q", "blobs", input=too_big, env=env)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert count(mariadb, "blobs") == 1


def test_several_big_payloads_are_split_across_statements(mariadb, tmp_path: Path):
    env = {"MQ_CONFIG": str(tmp_path / "b.yaml")}
    (tmp_path / "b.yaml").write_text("queues:\n  blobs:\n    format: bytes\n")
    items = [bytes([65 + n]) * (3 << 20) for n in range(6)]  # 18 MB in all
    result = mariadb.run("enqueue", "-q", "blobs", "-0", input=b"\0".join(items), env=env)
    assert result.exit_code == 0, result.output
    ids = ids_of(result)
    assert stored(mariadb, "blobs") == list(zip(ids, items, strict=True))


def test_a_compound_delay_as_mq_prints_it(db):
    # `mq list` shows "available in 1h29m": the same form is accepted back.
    result = db.run("enqueue", "-q", "q", "--delay", "1h30m", "{}")
    assert result.exit_code == 0, result.output
    shown = json.loads(db.run("show", result.stdout.strip(), "--json").stdout)
    created, available = (
        datetime.fromisoformat(shown[key].replace("Z", "+00:00"))
        for key in ("created_at", "available_at")
    )
    assert (available - created).total_seconds() == pytest.approx(5400, abs=1)


def test_a_long_line_through_a_pipe_takes_linear_time(sqlite_db):
    """--lines reads a pipe in 64 KiB pieces; scanning the whole line again for each
    piece made 50 MB take 20 s (100 MB: 84 s). Linear, it takes about a second."""
    size = 48_000_000
    writer = subprocess.Popen(
        [sys.executable, "-c",
         f"import sys; w = sys.stdout.buffer; w.write(b'\"' + b'x' * {size} + b'\"\\n'); "
         "w.write(b'{\"n\": 2}\\n')"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    out, err = sqlite_db.tmp / "enqueue.out", sqlite_db.tmp / "enqueue.err"
    try:
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mq_cli", "enqueue", "-q", "q", "--lines"],
                stdin=writer.stdout, stdout=stdout, stderr=stderr, env=sqlite_db.env(),
                cwd=sqlite_db.tmp,
            )  # fmt: skip
        # Its own CPU seconds (wait4), which other processes on a busy machine do not
        # inflate as they do wall time: ~1 s linear, 20 s quadratic.
        hang = threading.Timer(120, proc.kill)
        hang.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            hang.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        assert writer.stdout is not None
        writer.stdout.close()
        writer.wait()
    seconds = usage.ru_utime + usage.ru_stime
    assert proc.returncode == 0, err.read_text()
    assert len(out.read_text().split()) == 2
    assert [len(p) for _, p in stored(sqlite_db)] == [size + 2, 8]
    assert seconds < 10, f"{seconds:.1f} CPU s for one {size // 1_000_000} MB line"


def test_a_unique_key_with_nul_is_refused_on_every_backend(db):
    result = db.run("enqueue", "-q", "q", "--unique-key", "a\x00b", "{}")
    assert result.exit_code == 2, result.output
    assert "NUL" in result.stderr
    assert count(db) == 0
