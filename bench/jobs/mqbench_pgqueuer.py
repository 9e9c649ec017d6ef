"""pgqueuer on the bench's no-op job; runs in bench/peers-venv, never in mq's venv.

    python mqbench_pgqueuer.py install          # its schema (what `pgq install` does)
    python mqbench_pgqueuer.py drain            # one worker: drain mode
    python mqbench_pgqueuer.py enqueue N        # Queries.enqueue with lists, 1,000 per call

Programmatic, not `pgq run --mode drain`: pgqueuer 1.6's CLI fails in its log
level setup (AttributeError: 'str' object has no attribute 'name'). The
database comes from MQBENCH_PG_URL; the driver from MQBENCH_PGQ_DRIVER:
`asyncpg` (default, as pgqueuer's README) or `psycopg` (an AsyncConnection in
autocommit: its NOTIFY watcher holds the connection for up to 1 s at a time
while no notification comes, so each query can wait that long). MQBENCH_PGQ_BATCH
sets `PgQueuer.run(batch_size=...)`; unset, the worker runs with run()'s own
defaults (batch_size 10). The durability of the tables (pgqueuer's
docs/guides/performance-tuning.md) is read by pgqueuer itself at install, from
PGQUEUER_DURABILITY (durable by default).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from pgqueuer import PgQueuer, Queries
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job

PAYLOAD = b'{"n": 1, "pad": "' + b"x" * 180 + b'"}'
DRIVER = os.environ.get("MQBENCH_PGQ_DRIVER", "asyncpg")
BATCH = os.environ.get("MQBENCH_PGQ_BATCH")


async def connect() -> Any:
    url = os.environ["MQBENCH_PG_URL"]
    if DRIVER == "psycopg":
        import psycopg

        return await psycopg.AsyncConnection.connect(url, autocommit=True)
    import asyncpg

    return await asyncpg.connect(url)


def queries(conn: Any) -> Queries:
    if DRIVER == "psycopg":
        return Queries.from_psycopg_connection(conn)
    return Queries.from_asyncpg_connection(conn)


async def install() -> None:
    conn = await connect()
    try:
        await queries(conn).install()
    finally:
        await conn.close()


async def drain() -> None:
    conn = await connect()
    try:
        if DRIVER == "psycopg":
            pgq = PgQueuer.from_psycopg_connection(conn)
        else:
            pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint("noop")
        async def noop(job: Job) -> None:
            """The same no-op as mqbench_jobs.noop."""

        # Only what is asked for: the default row must run with run()'s own defaults.
        tuning = {"batch_size": int(BATCH)} if BATCH else {}
        await pgq.run(mode=QueueExecutionMode.drain, **tuning)
    finally:
        await conn.close()


async def enqueue(count: int) -> None:
    conn = await connect()
    try:
        q = queries(conn)
        for start in range(0, count, 1000):
            n = min(1000, count - start)
            await q.enqueue(["noop"] * n, [PAYLOAD] * n, [0] * n)
    finally:
        await conn.close()


if __name__ == "__main__":
    command = sys.argv[1:2]
    if command == ["install"]:
        asyncio.run(install())
    elif command == ["drain"]:
        asyncio.run(drain())
    elif command == ["enqueue"]:
        asyncio.run(enqueue(int(sys.argv[2])))
    else:
        sys.exit(f"usage: {sys.argv[0]} install | drain | enqueue N")
