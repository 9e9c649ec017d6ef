"""huey's SQLite consumer on the bench's no-op task (`huey_consumer mqbench_huey.huey`)."""

from __future__ import annotations

import os

from huey import SqliteHuey

huey = SqliteHuey("mqbench", filename=os.environ.get("MQBENCH_HUEY_DB", "/tmp/mqbench-huey.db"))


@huey.task()
def noop(payload: object) -> None:
    """The same no-op as mqbench_jobs.noop."""
