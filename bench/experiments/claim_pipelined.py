"""group_ack's claim on MariaDB sent ahead in one thread, its statements pipelined: measured.

    bench/.venv/bin/python bench/experiments/claim_pipelined.py [--messages 20000]
        [--work 600] [--rounds 3] [--url mysql://root@127.0.0.1:3306/mqbench_claim_pipelined]

claim_thread.py found that a second thread cannot overlap MariaDB's claim with
the drain's work on a batch. But a server reads a connection's statements in
order, and PyMySQL's ``query()`` is a send and a read (``_execute_command``,
``_read_query_result``: mq_cli/backends/mysql/inflight.py splits them already).
So the claim's first three statements (START TRANSACTION, the last group's
DELETE, the SELECT ... FOR UPDATE SKIP LOCKED) can go before the batch's last
messages are worked through, and be read after; the guarded mark and the COMMIT
follow, in turn. This loop is the floor's (bench/floor.py, --ack batch) with
``--work`` additions of Python per message standing in for the drain's
per-result work (standin.py):

- in turn: claim, then work through the batch (claim_thread.py's loop);
- pipelined: work through the batch's first 4 messages, send the next claim's
  first three statements (as mq does once what is left should end within
  20 ms: runners/python.py, ending_soon), work through the rest, read them,
  mark, commit.

Its database (the URL's) is created if missing; its table mq_messages is made by
`mq init` if missing and emptied before each run. Prints messages a second each way.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]  # floor.py (our neighbours are beside us)

from claim_thread import BATCH, claim, database, fill, in_turn  # noqa: E402
from standin import work, work_line  # noqa: E402

QUEUE = "claim_thread"  # fill() and claim() fill and claim this one
SENT_AFTER = 4  # messages of a batch worked through before the next claim goes


def _send(conn: Any, sql: str) -> None:
    conn._execute_command(3, sql)  # COM_QUERY


def _read(conn: Any) -> tuple[Any, ...]:
    conn._next_seq_id = 1  # each statement's reply starts its own sequence
    conn._read_query_result()
    return tuple(conn._result.rows or ())


def pipelined(db: Any, rounds: int) -> float:
    conn, sql = db.conn, db.sql
    handled = 0
    started = time.perf_counter()
    rows = claim(db, [])
    carry: list[int] = []  # successes after the last claim went: they go with the next
    while rows:
        for _ in rows[:SENT_AFTER]:
            work(rounds)
        done = carry + [row[0] for row in rows[:SENT_AFTER]]
        _send(conn, "START TRANSACTION")
        if done:
            many = sql["ack_delete_many"].replace("{ids}", ",".join(map(str, done)))
            _send(conn, many % conn.escape("o"))
        _send(conn, sql["claim_select"] % (conn.escape(QUEUE), BATCH))
        for _ in rows[SENT_AFTER:]:
            work(rounds)
        handled += len(rows)
        carry = [row[0] for row in rows[SENT_AFTER:]]
        _read(conn)
        if done:
            _read(conn)
        rows = list(_read(conn))
        with conn.cursor() as cur:
            if rows:
                mark = sql["claim_mark"].replace("{ids}", db.ids(len(rows)))
                cur.execute(mark, ("o", *[row[0] for row in rows]))
            cur.execute("COMMIT")
    if carry:
        db.transaction(lambda: db.cur.execute(
            sql["ack_delete_many"].replace("{ids}", db.ids(len(carry))), (*carry, "o")
        ))  # fmt: skip
    return handled / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--work", type=int, default=600, help="additions per message")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="mysql://root@127.0.0.1:3306/mqbench_claim_pipelined")
    args = parser.parse_args()
    db = database(args.url)
    print(work_line(args.work))
    for round_ in range(1, args.rounds + 1):
        fill(db, args.messages)
        one = in_turn(db, args.work)
        fill(db, args.messages)
        two = pipelined(db, args.work)
        print(f"round {round_}: in turn {one:,.0f} msg/s, the claim pipelined {two:,.0f} msg/s")


if __name__ == "__main__":
    main()
