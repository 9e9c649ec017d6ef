"""Fuzzing with hypothesis: durations and config values, queue and table names,
payloads of arbitrary bytes / text / JSON through enqueue -> drain on both
backends, and --lines / -0 splitting against a reference implementation."""

from __future__ import annotations

import base64
import io
import itertools
import json
import math
import re

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mq_cli
from mq_cli.backends.postgres.dialect import MAX_TABLE as MAX_PG_TABLE
from mq_cli.backends.sqlite.dialect import SqliteBackend
from mq_cli.cli import inputs
from mq_cli.core.config import load_config, validate_queue_name, validate_table_name
from mq_cli.core.durations import format_duration, parse_duration
from mq_cli.core.errors import ConfigError, PayloadTooLarge
from mq_cli.core.keys import QUEUE_KEYS
from mq_cli.host.slots import acquire
from tests.faults.history import read

pytestmark = pytest.mark.slow

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLOW_FUZZ = settings(FUZZ, max_examples=15)

MAX_SECONDS = 36500 * 86400.0
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "": 1.0}
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,56}")


# -- durations ---------------------------------------------------------------------------


def reference_duration(text: str) -> float | None:
    """What the contract says a duration is: a number, optionally one unit, or a
    compound such as 1h30m (issue 13: what mq prints can be given back); None if not.

    Like mq's own pattern, digits and spaces are Unicode ones (see
    test_contract_gaps.py for why that is questionable): hypothesis must not
    trip over it here."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if match:
        seconds = float(match.group(1)) * UNITS[match.group(2) or ""]
        return seconds if seconds <= MAX_SECONDS else None
    return reference_compound(text.strip())


def reference_compound(text: str) -> float | None:
    """``1h30m``: number-unit parts without spaces, each unit once, largest first."""
    order = ["d", "h", "m", "s", "ms"]
    total, last, rest = 0.0, -1, text
    while rest:
        match = re.match(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", rest, re.ASCII)
        if not match or order.index(match.group(2)) <= last:
            return None
        last = order.index(match.group(2))
        total += float(match.group(1)) * UNITS[match.group(2)]
        rest = rest[match.end() :]
    if last < 0:  # an empty text is no duration
        return None
    return total if total <= MAX_SECONDS else None


duration_text = st.one_of(
    st.builds(
        lambda n, frac, unit, pad: f"{pad}{n}{frac}{unit}{pad}",
        st.integers(0, 10**12),
        st.sampled_from(["", ".5", ".25", ".0"]),
        st.sampled_from(["", "ms", "s", "m", "h", "d", "x", "sec", "M", " s"]),
        st.sampled_from(["", " ", "\t"]),
    ),
    st.text(max_size=12),
    st.text(alphabet="0123456789.msdh -+e", max_size=10),
    st.lists(
        st.tuples(st.integers(0, 99), st.sampled_from(["d", "h", "m", "s", "ms"])),
        min_size=2,
        max_size=4,
    ).map(lambda parts: "".join(f"{n}{unit}" for n, unit in parts)),
)


@FUZZ
@given(duration_text)
def test_duration_text_matches_the_reference(text):
    expected = reference_duration(text)
    if expected is None:
        with pytest.raises(ValueError):
            parse_duration(text)
    else:
        assert parse_duration(text) == pytest.approx(expected)


@FUZZ
@given(st.one_of(st.integers(-(10**20), 10**20), st.floats(), st.booleans(), st.none()))
def test_duration_numbers(value):
    if isinstance(value, bool) or value is None:
        with pytest.raises(ValueError):
            parse_duration(value)
        return
    if value < 0 or not math.isfinite(value) or value > MAX_SECONDS or value != value:
        with pytest.raises(ValueError):
            parse_duration(value)
        return
    assert parse_duration(value) == float(value)
    assert isinstance(format_duration(float(value)), str)


@SLOW_FUZZ
@given(duration_text)
def test_durations_on_the_command_line(sqlite_db, text):
    assume("\x00" not in text)
    expected = reference_duration(text)
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("enqueue", "-q", "q", f"--delay={text}", "{}")
    if expected is None:
        assert result.exit_code == 2, result.output
        assert "--delay" in result.stderr and "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result.output
    sqlite_db.sql("DELETE FROM mq_messages")


config_values = st.one_of(
    st.integers(-5, 10**7),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=10),
    duration_text,
    st.lists(st.integers(), max_size=2),
    st.sampled_from(["json", "text", "bytes", "xml", "tests.jobs:noop", "exec:/bin/true", ""]),
)


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(QUEUE_KEYS) + ["colour"]), config_values, max_size=4))
def test_queue_settings_are_accepted_or_named(tmp_path, settings_map):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump({"queues": {"q": settings_map}}))
    try:
        config = load_config(str(path))
    except ConfigError as exc:
        text = str(exc)
        assert str(path) in text and "line" in text
        assert any(f"queues.q.{key}" in text for key in settings_map), text
        return
    queue = config.queue("q")
    for key, value in settings_map.items():
        assert key in QUEUE_KEYS
        assert getattr(queue, key) == QUEUE_KEYS[key](value)
    assert queue.retry_delay <= queue.retry_delay_max


# -- names --------------------------------------------------------------------------------


names = st.one_of(
    st.text(max_size=70),
    st.text(alphabet="abcXYZ019_.-/ \n\x00é`'\";", min_size=1, max_size=70),
    st.from_regex(QUEUE_NAME, fullmatch=True),
)


@FUZZ
@given(names)
def test_queue_names_are_validated_everywhere_alike(tmp_path, name):
    valid = bool(QUEUE_NAME.fullmatch(name)) and name.isascii()
    if valid:
        assert validate_queue_name(name) == name
    else:
        with pytest.raises(ConfigError):
            validate_queue_name(name)
    locks = tmp_path / "locks"
    try:
        slot = acquire(str(locks), name, 1)
    except ConfigError:
        assert not valid
    else:
        assert valid and slot is not None
        assert slot.path == str(locks / f"{name}.0.lock")  # never outside lock_dir
        slot.release()


@SLOW_FUZZ
@given(names)
def test_queue_names_on_the_command_line(sqlite_db, name):
    valid = bool(QUEUE_NAME.fullmatch(name)) and name.isascii()
    assume("\x00" not in name)
    assert sqlite_db.run("init").exit_code == 0
    result = sqlite_db.run("enqueue", f"--queue={name}", "{}")
    assert result.exit_code == (0 if valid else 2), result.output
    if not valid:
        assert "invalid queue name" in result.stderr
        assert "Traceback" not in result.output
    stored = sqlite_db.sql("SELECT COUNT(*) FROM mq_messages WHERE queue = %s", (name,))
    assert stored == [(1 if valid else 0,)]
    if valid:
        sqlite_db.sql("DELETE FROM mq_messages")


@FUZZ
@given(st.one_of(names, st.from_regex(TABLE_NAME, fullmatch=True)))
def test_table_names_are_validated(tmp_path, name):
    valid = bool(TABLE_NAME.fullmatch(name)) and name.isascii()
    if valid:
        assert validate_table_name(name) == name
    else:
        with pytest.raises(ConfigError):
            validate_table_name(name)
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"table": name}))
    try:
        load_config(str(path), f"sqlite:///{tmp_path}/t.db")
    except ConfigError as exc:
        assert not valid and "table" in str(exc)
    else:
        assert valid


@SLOW_FUZZ
@given(st.from_regex(TABLE_NAME, fullmatch=True))
def test_any_valid_table_name_works(db, name):
    """Reserved words and odd names included: the name is quoted wherever it is used."""
    config = db.tmp / f"table-{abs(hash(name))}.yaml"
    config.write_text(yaml.safe_dump({"table": name}))
    if db.kind == "postgres" and len(name) > MAX_PG_TABLE:
        # 63-byte identifiers: `<name>_unique` would be cut short, so the name is refused.
        result = db.run("-c", str(config), "init")
        assert result.exit_code == 2 and "at most 56 characters" in result.stderr, result.output
        return
    try:
        for args in (["init"], ["enqueue", "-q", "q", "[1]"], ["stats", "--json"]):
            result = db.run("-c", str(config), *args)
            assert result.exit_code == 0, (name, result.output)
        assert json.loads(result.stdout)["q"]["ready"] == 1
    finally:
        # the next example may pick a name whose `<name>_meta` is this one
        quote = "`" if db.kind == "mysql" else '"'
        for table in (name, f"{name}_meta"):
            db.sql(f"DROP TABLE IF EXISTS {quote}{table}{quote}")


# -- payloads through enqueue -> drain ------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def roundtrip_config(db):
    path = db.tmp / "roundtrip.yaml"
    queues = {
        q: {"handler": "tests.faults.jobs:roundtrip", "format": fmt}
        for q, fmt in (("b", "bytes"), ("t", "text"), ("j", "json"))
    }
    path.write_text(yaml.safe_dump({"lock_dir": str(db.tmp / "locks"), "queues": queues}))
    return path


_examples = itertools.count()


@SLOW_FUZZ
@given(
    raw=st.lists(st.binary(max_size=300), max_size=4),
    texts=st.lists(st.text(max_size=100), max_size=4),
    values=st.lists(json_values, max_size=4),
    via_api=st.booleans(),
    ascii_only=st.booleans(),
)
def test_payloads_round_trip(db, roundtrip_config, raw, texts, values, via_api, ascii_only):
    history = db.tmp / f"roundtrip-{next(_examples)}.jsonl"
    env = {"MQ_CONFIG": str(roundtrip_config), "MQ_FAULT_HISTORY": str(history)}
    expected: dict[int, tuple[str, str]] = {}
    db.sql("DELETE FROM mq_messages")  # what a failed example left behind

    def cli(queue: str, *args: str, data: bytes | None = None) -> int:
        # `--`: a payload such as -1 is not an option
        result = db.run("enqueue", "-q", queue, "--", *args, input=data, env=env)
        assert result.exit_code == 0, result.output
        (new_id,) = result.stdout.split()
        return int(new_id)

    if via_api:
        with mq_cli.connect(config=str(roundtrip_config), database=db.url) as mq:
            for data in raw:
                expected[mq.enqueue("b", data)] = ("bytes", base64.b64encode(data).decode())
            for text in texts:
                expected[mq.enqueue("t", text)] = ("str", json.dumps(text))
            for value in values:
                kind = type(value).__name__
                expected[mq.enqueue("j", value)] = (kind, json.dumps(value, sort_keys=True))
    else:
        for data in raw:
            expected[cli("b", data=data)] = ("bytes", base64.b64encode(data).decode())
        for text in texts:
            expected[cli("t", data=text.encode())] = ("str", json.dumps(text))
        for value in values:
            arg = json.dumps(value, ensure_ascii=ascii_only)
            kind = type(value).__name__
            expected[cli("j", arg)] = (kind, json.dumps(value, sort_keys=True))

    result = db.run("drain", env=env)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    got = {r["id"]: (r["type"], r["value"]) for r in read(history)}
    assert got == expected
    assert db.sql("SELECT COUNT(*) FROM mq_messages") == [(0,)]


# -- splitting stdin ---------------------------------------------------------------------------


def reference_lines(data: bytes) -> list[tuple[str, bytes]]:
    """--lines: each non-blank line one message, its \\n or \\r\\n removed; labels count all lines."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    out = []
    for number, part in enumerate(parts, 1):
        if part.endswith(b"\r"):
            part = part[:-1]
        if part.strip():
            out.append((f"line {number}", part))
    return out


def reference_nul(data: bytes) -> list[tuple[str, bytes]]:
    """-0: each non-empty NUL-terminated item one message (the last may lack its NUL)."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [(f"item {n}", part) for n, part in enumerate(parts, 1) if part]


def is_json(item: bytes) -> bool:
    """A json queue's rule: UTF-8, not blank, JSON without NaN/Infinity."""

    def no_constants(name: str) -> None:
        raise ValueError(name)

    try:
        text = item.decode("utf-8")
        json.loads(text, parse_constant=no_constants)
    except ValueError:
        return False
    return bool(text.strip())


stdin_data = st.one_of(
    st.binary(max_size=400),
    st.lists(
        st.sampled_from(
            [b"\n", b"\r\n", b"\r", b"\0", b" ", b"\t", b"{}", b"[1]", b"x", b"\xff", b'"a"']
        ),
        max_size=80,
    ).map(b"".join),
)


@FUZZ
@given(stdin_data, st.integers(1, 64))
def test_splitting_matches_the_reference(monkeypatch, data, chunk):
    monkeypatch.setattr(inputs, "CHUNK", chunk)  # items cut across reads too
    limit = 10**6
    assert list(inputs.lines(io.BytesIO(data), limit)) == reference_lines(data)
    assert list(inputs.nul_separated(io.BytesIO(data), limit)) == reference_nul(data)
    assert list(inputs.whole(io.BytesIO(data), limit)) == [("stdin", data)]


@SLOW_FUZZ
@given(
    data=stdin_data,
    mode=st.sampled_from(["--lines", "-0"]),
    fmt=st.sampled_from(["bytes", "json"]),
    limit=st.integers(1, 12),
)
def test_enqueue_splitting_end_to_end(sqlite_db, monkeypatch, data, mode, fmt, limit):
    """The CLI stores exactly the reference's items, in order, up to the first bad
    one (too large, or invalid JSON), which it names; exit 1 then."""
    monkeypatch.setattr(SqliteBackend, "max_payload", limit)
    config = sqlite_db.tmp / "split.yaml"
    config.write_text(yaml.safe_dump({"queues": {"q": {"format": fmt}}}))
    assert sqlite_db.run("init").exit_code == 0
    sqlite_db.sql("DELETE FROM mq_messages")
    items = reference_lines(data) if mode == "--lines" else reference_nul(data)
    good: list[bytes] = []
    bad_label = None
    for label, item in items:
        if len(item) > limit:
            bad_label = label
            break
        if fmt == "json" and not is_json(item):
            bad_label = label
            break
        good.append(item)
    result = sqlite_db.run("-c", str(config), "enqueue", "-q", "q", mode, input=data)
    stored = [bytes(p) for (p,) in sqlite_db.sql("SELECT payload FROM mq_messages ORDER BY id")]
    assert stored == good, result.output
    assert len(result.stdout.split()) == len(good)
    if bad_label is None:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1, result.output
        assert re.search(rf"\b{bad_label}\b", result.stderr), (bad_label, result.stderr)


@FUZZ
@given(st.integers(1, 50), st.data())
def test_a_line_just_over_the_limit_is_refused_by_the_splitter(limit, data):
    # Documents where the size check lives: `lines` refuses any non-blank line
    # longer than the limit, its line ending aside (enqueue checks again).
    line = data.draw(
        st.binary(min_size=limit + 1, max_size=limit + 40).filter(
            lambda b: b"\n" not in b and not b.endswith(b"\r") and b.strip()
        )
    )
    with pytest.raises(PayloadTooLarge):
        list(inputs.lines(io.BytesIO(line + b"\n"), limit))
    with pytest.raises(PayloadTooLarge):
        list(inputs.lines(io.BytesIO(line), limit))  # the last line, with no newline


@FUZZ
@given(st.integers(1, 50), st.sampled_from([b" ", b"\t", b"\r", b" \r"]), st.integers(1, 64))
def test_a_long_blank_line_is_skipped_not_refused(limit, blank, chunk):
    # A blank line is no message, however long: nothing to refuse, and the
    # splitter keeps at most a chunk of it in memory.
    data = b"a\n" + blank * (limit * 50) + b"\nb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inputs, "CHUNK", chunk)
        assert list(inputs.lines(io.BytesIO(data), limit)) == [("line 1", b"a"), ("line 3", b"b")]
