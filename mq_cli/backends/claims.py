"""Claims that verify what they took: what a claim does when its guarded mark
changed fewer rows than it selected, and the test-only switch that makes claims
race for the same rows (an engine whose SKIP LOCKED does not lock).
"""

from __future__ import annotations

import logging
import os
import re

log = logging.getLogger("mq")

#: claims in a row that lost every row they selected to other drains before one
#: reports the queue empty (only where the SELECT did not lock: see claim_mark)
RACE_TRIES = 50


#: TEST ONLY (tests/faults/test_racing_claims.py): set to 1, it drops the row locks
#: (FOR UPDATE [SKIP LOCKED]) from the claim's SELECT, so that concurrent claims
#: race for the same rows as on an engine whose SKIP LOCKED does not lock; the
#: guarded mark must still give each row to one drain. Never set it in production:
#: every drain would then contend for the same rows.
UNLOCKED_CLAIM_ENV = "MQ_TEST_UNLOCKED_CLAIM"


def unlock_claims_for_tests(sql: dict[str, str], *names: str) -> None:
    """With $MQ_TEST_UNLOCKED_CLAIM=1 (tests only), the claim statements ``names``
    of ``sql`` lose their FOR UPDATE [SKIP LOCKED]; read once, where a dialect
    builds its statements."""
    if os.environ.get(UNLOCKED_CLAIM_ENV) != "1":
        return
    for name in names:
        sql[name], found = re.subn(r"\s+FOR UPDATE(\s+SKIP LOCKED)?\b", "", sql[name])
        if not found:
            raise AssertionError(f"{UNLOCKED_CLAIM_ENV}: no FOR UPDATE in {name}")


def lost_race(queue: str, taken: int, selected: int) -> None:
    """Said with -v: a claim found rows it selected marked by another drain first,
    which row locks prevent (an engine that ignores them, or the test switch)."""
    log.info(
        "queue %s: another drain marked %d of the %d message(s) this claim selected first; "
        "this claim runs only the %d it marked", queue, selected - taken, selected, taken,
    )  # fmt: skip
