"""procrastinate on the bench's no-op job; runs in bench/peers-venv, never in mq's venv.

    procrastinate --app=mqbench_procrastinate.app worker --one-shot --delete-jobs successful
    python -c 'import mqbench_procrastinate as m; m.enqueue(N)'   # batch_defer, 1,000 a call

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


def enqueue(count: int) -> None:
    with app.open():
        for start in range(0, count, 1000):
            noop.batch_defer(*[PAYLOAD] * min(1000, count - start))
