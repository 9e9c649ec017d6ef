"""The run log's terms, shared by the drain that writes it (drain/runlog.py) and the
commands that read it (`mq status`, `mq stop`, `mq check`, `mq list`'s running message).

A drain keeps its results in memory (counts, and wait and duration histograms
per queue) and writes them a few statements at a time: one row for the run
when it first has something to say, one slice per queue at most every
:data:`SLICE_SECONDS` and at its end, and its counts with each slice. Nothing
is written per message, except once for a message that runs for a second or
more (which message runs now, for `mq status`). A drain that claimed nothing
and ended within a slice writes nothing at all. Times are Unix seconds of the
database's clock. The SQL is the backends' (backends/sqlrunlog.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from mq_cli.core.errors import MqError, PermissionDenied, SchemaMissing

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend

#: a drain writes its results at most this often (and at its end)
SLICE_SECONDS = 20.0
#: a live run's counts (`mq status`: CLAIMED, DONE, FAILED) are written at most this
#: often, when they changed: one UPDATE of one row, so the views are right between slices
COUNTS_SECONDS = 2.0
#: a message that has run this long is written as the run's running message
RUNNING_AFTER = 1.0
#: `mq status`: a run not ended and not seen for this long is no longer live
LIVE_WITHIN = 90.0


def denied_text(privilege: str, tables: Sequence[str]) -> str:
    """What every command says when this user may not use the run log's tables."""
    return (
        f"run log: no {privilege} on {' and '.join(tables)} for this database user; "
        "grant it (docs/databases/privileges.md)"
    )


def problem(backend: Backend) -> MqError | None:
    """Why this user cannot read the run log (`mq status`, `mq check`, `mq stats
    --prometheus`, a drain's warning say it alike); None when it can."""
    access = backend.runlog_access()
    denied = [name for name, why in access.items() if why == "denied"]
    if denied:
        return PermissionDenied(denied_text("SELECT", denied))
    missing = [name for name, why in access.items() if why == "missing"]
    if missing:
        return SchemaMissing(
            f"the run log's table(s) {', '.join(missing)} are missing: run `mq init` "
            "to restore them"
        )
    return None


class Histogram:
    """Counts in fixed log-scale buckets: 10 per decade from 1 ms to ~28 h.

    Bucket 0 holds everything under 1 ms; bucket i >= 1 holds
    [1 ms * 10^((i-1)/10), 1 ms * 10^(i/10)). Stored as text "i:n i:n ...",
    so histograms of any runs and slices merge by adding, and a percentile
    comes out within about 12 % of the true value.
    """

    FLOOR = 0.001
    PER_DECADE = 10
    TOP = 80

    def __init__(self, counts: dict[int, int] | None = None):
        self.counts: dict[int, int] = counts or {}

    @classmethod
    def bucket(cls, seconds: float) -> int:
        if not seconds >= cls.FLOOR:  # NaN too
            return 0
        return min(cls.TOP, 1 + int(math.log10(seconds / cls.FLOOR) * cls.PER_DECADE))

    @classmethod
    def value(cls, index: int) -> float:
        """A bucket's representative value: the geometric middle of its bounds."""
        if index <= 0:
            return cls.FLOOR / 2
        return cls.FLOOR * 10 ** ((index - 0.5) / cls.PER_DECADE)

    def add(self, seconds: float) -> None:
        # bucket(), inline: two of these per message run
        if seconds >= self.FLOOR:
            index = 1 + int(math.log10(seconds / self.FLOOR) * self.PER_DECADE)
            if index > self.TOP:
                index = self.TOP
        else:
            index = 0
        self.counts[index] = self.counts.get(index, 0) + 1

    def merge(self, other: Histogram) -> None:
        for index, count in other.counts.items():
            self.counts[index] = self.counts.get(index, 0) + count

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def quantile(self, q: float) -> float | None:
        """The value below which a fraction ``q`` of the counts lies; None when empty."""
        total = self.total
        if not total:
            return None
        rank = max(1, math.ceil(q * total))
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return self.value(index)
        return self.value(max(self.counts))

    def encode(self) -> str:
        return " ".join(f"{i}:{n}" for i, n in sorted(self.counts.items()) if n)

    @classmethod
    def decode(cls, text: str) -> Histogram:
        counts: dict[int, int] = {}
        for part in text.split():
            index, _, count = part.partition(":")
            try:
                i = min(max(int(index), 0), cls.TOP)
                counts[i] = counts.get(i, 0) + int(count)
            except ValueError:
                continue  # a damaged entry: the rest still counts
        return cls(counts)

    @classmethod
    def merged(cls, texts: Iterable[str]) -> Histogram:
        result = cls()
        for text in texts:
            result.merge(cls.decode(text))
        return result
