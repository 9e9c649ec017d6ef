"""procrastinate on the bench's no-op job; runs in bench/peers-venv, never in mq's venv.

    procrastinate --app=mqbench_procrastinate.app worker --one-shot [--concurrency N ...]
    python -c 'import mqbench_procrastinate as m; m.enqueue(N)'   # batch_defer, 1,000 a call
    python -c 'import mqbench_procrastinate as m; m.enqueue(N, "noop_async")'

Two tasks doing the same nothing: `noop`, a plain function, and `noop_async`, a
coroutine: procrastinate's docs/howto/concurrency.md explains a worker's
--concurrency with async tasks, so its fastest configuration defers that one.

(imported, not run as __main__: procrastinate warns about an app in __main__.)

The database comes from MQBENCH_PG_URL.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

PAYLOAD = {"n": 1, "pad": "x" * 180}  # 199 bytes of JSON, as mq's payload

app = App(connector=PsycopgConnector(conninfo=os.environ["MQBENCH_PG_URL"]))


@app.task(name="noop")
def noop(**payload: object) -> None:
    """The same no-op as mqbench_jobs.noop."""


@app.task(name="noop_async")
async def noop_async(**payload: object) -> None:
    """The same no-op, as a coroutine."""


def enqueue(count: int, task: str = "noop") -> None:
    deferrer = {"noop": noop, "noop_async": noop_async}[task]
    with app.open():
        for start in range(0, count, 1000):
            deferrer.batch_defer(*[PAYLOAD] * min(1000, count - start))
