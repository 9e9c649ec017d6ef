"""The console's counts at any size (backends/counts.py), on SQLite, MariaDB and PostgreSQL:
exact up to a bound, estimated from a sample above it and marked so on the pages and
in the JSON, while `mq stats --json` stays exact; a big queue's pages walk the primary
key (sqlops.BY_ID) and show what the sorted pages show."""

from __future__ import annotations

import json
import time

import mq_cli
from mq_cli.backends import counts, sqlops
from tests.webconsole import Server, write_config


def _fill(db, queue: str, count: int, chunk: int = 1000) -> None:
    with mq_cli.connect(database=db.url) as mq:
        for first in range(0, count, chunk):
            mq.enqueue_many(queue, range(first, min(first + chunk, count)))


def _counts(stats: dict) -> dict:
    """A queue's stats but its backlog age, which grows between two reads."""
    return {key: value for key, value in stats.items() if key != "oldest_ready_seconds"}


def test_the_console_marks_the_counts_it_estimates(db, tmp_path):
    """Above the bound: ~ and a title on the overview and the queue page, `estimated`
    in /api/stats and /api/status; `mq stats --json` (and ?exact=1) count exactly."""
    write_config(tmp_path)
    big = counts.ESTIMATE_ABOVE + 500
    _fill(db, "big", big)
    _fill(db, "small", 3)
    exact = json.loads(db.run("stats", "--json").output)
    assert exact["big"]["ready"] == big and "estimated" not in exact["big"]
    server = Server(db)
    try:
        operator = server.client()
        stats = operator.get("/api/stats").json()
        # the whole table is the sample here (fewer ids than it reads): the estimate is exact
        assert stats["big"]["ready"] == big and stats["big"]["estimated"] == ["ready"]
        assert _counts(stats["small"]) == _counts(exact["small"])  # exact, no such key
        by_the_cli = operator.get("/api/stats?exact=1").json()
        assert {name: _counts(s) for name, s in by_the_cli.items()} == {
            name: _counts(s) for name, s in exact.items()
        }
        refused = operator.get("/api/stats?exact=yes")
        assert refused.status == 400 and "exact" in refused.json()["error"]
        status = operator.get("/api/status").json()["queues"]
        assert status["big"]["estimated"] == ["ready"] and "estimated" not in status["small"]
        assert "estimated" not in operator.get("/api/status?exact=1").json()["queues"]["big"]
        overview = operator.get("/").body
        assert f">~{big:,}</abbr>" in overview and 'title="an estimate' in overview
        assert ">3</a>" in overview  # the small queue's count, unmarked
        page = operator.get("/queues/big").body
        assert 'ready <abbr class="estimate" title="an estimate' in page and f"~{big:,}" in page
        assert "~" not in operator.get("/queues/small").body.split('class="counts"')[1][:200]
    finally:
        server.stop()


def test_a_count_above_the_bound_is_estimated_from_a_sample(db, monkeypatch):
    """Windows of ids spread over the table, scaled: near the truth; what is under the
    bound stays exact."""
    monkeypatch.setattr(counts, "ESTIMATE_ABOVE", 100)
    monkeypatch.setattr(counts, "WINDOWS", 10)
    monkeypatch.setattr(counts, "WIDTH", 100)
    with mq_cli.connect(database=db.url) as mq:
        for _ in range(30):  # ids interleaved: 75 of queue a, then 25 of b
            mq.enqueue_many("a", range(75))
            mq.enqueue_many("b", range(25))
        mq.enqueue_many("a", range(40), delay=3600)
        exact = mq.stats()
        estimated = mq.stats(estimate=True)
    assert (exact["a"].ready, exact["b"].ready, exact["a"].delayed) == (2250, 750, 40)
    assert estimated["a"].estimated == ("ready",) and estimated["b"].estimated == ("ready",)
    assert abs(estimated["a"].ready - 2250) <= 2250 * 0.1
    assert abs(estimated["b"].ready - 750) <= 750 * 0.1
    assert estimated["a"].delayed == 40  # under the bound: exact
    assert estimated["a"].oldest_ready_seconds is not None
    assert exact["a"].estimated == () and "estimated" not in exact["a"].to_json()


def test_a_big_queue_pages_by_id_as_a_small_one_does(db, monkeypatch):
    """The primary-key walk (SQLite: list_all_by_id) lists the same messages in the
    same order as the sorted read, for every state and page."""
    with mq_cli.connect(database=db.url) as mq:
        for _ in range(6):
            mq.enqueue_many("a", range(7))
            mq.enqueue_many("b", range(3))
            mq.enqueue_many("a", range(2), delay=3600)

    def listed(*args: str) -> list[tuple[int, str]]:
        result = db.run("list", "-q", "a", "--json", "--limit", "15", *args)
        assert result.exit_code == 0, result.output
        return [(m["id"], m["state"]) for m in json.loads(result.output.splitlines()[0])]

    choices = [(), ("--status", "ready"), ("--status", "delayed")]
    sorted_read = [listed(*args) for args in choices]
    monkeypatch.setattr(sqlops, "BY_ID", 5)
    assert [listed(*args) for args in choices] == sorted_read
    assert len(sorted_read[0]) == 15 and {s for _, s in sorted_read[2]} == {"delayed"}


def test_the_oldest_ready_message_is_found_across_priorities(db, monkeypatch):
    """The console's backlog age (the first of each priority, then the first due
    delayed one) is the one `mq stats` reads, however many priorities there are."""
    with mq_cli.connect(database=db.url) as mq:
        mq.enqueue_many("a", range(3), priority=0)  # the oldest, of the lowest priority
        db.sql(f"UPDATE mq_messages SET available_at = {db.now_sql(-600)} WHERE queue = 'a'")  # noqa: S608
        for priority in (1, 2, 3):
            mq.enqueue_many("a", range(2), priority=priority)
        exact = mq.stats()["a"].oldest_ready_seconds
        bounded = mq.stats(estimate=True)["a"].oldest_ready_seconds
        monkeypatch.setattr(counts, "PRIORITIES", 2)  # the rest in one read
        rest = mq.stats(estimate=True)["a"].oldest_ready_seconds
    assert exact is not None and bounded is not None and rest is not None
    assert 599 < exact < 660 and abs(bounded - exact) < 5 and abs(rest - exact) < 5


def test_a_unique_key_is_looked_up_and_delayed_pages_read_delayed_rows(db):
    """The queue page's key filter reads the unique index (one message at most, in its
    queue, its state filter still applied); its delayed filter lists exactly the
    messages `mq list --status delayed` does."""
    from mq_cli.ops.browse import Filter

    with mq_cli.connect(database=db.url) as mq:
        for i in range(20):
            mq.enqueue("a", i, unique_key=f"k{i}", delay=3600 if i % 3 == 0 else 0)
        mq.enqueue("b", "other", unique_key="k5")
        mq.enqueue("a", "due soon", delay=0.05)  # stored delayed, then due: ready
        page = mq.browse("a", Filter(unique_key="k5"))
        assert [(m.unique_key, m.queue) for m in page.messages] == [("k5", "a")]
        assert page.next_after is None
        assert mq.browse("a", Filter(unique_key="k6", state="delayed")).messages
        assert not mq.browse("a", Filter(unique_key="k5", state="delayed")).messages
        assert not mq.browse("a", Filter(unique_key="nope")).messages
        assert not mq.browse("a", Filter(unique_key="k5"), after=page.messages[0].id).messages
        time.sleep(0.2)
        delayed = mq.browse("a", Filter(state="delayed"))
        listed = mq.list_messages("a", "delayed", 100)
    assert [m.id for m in delayed.messages] == [item.message.id for item in listed]
    assert len(delayed.messages) == 7 and {delayed.states[m.id] for m in delayed.messages} == {
        "delayed"
    }
