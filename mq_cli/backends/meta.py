"""The meta table: the clock record, paused queues and the notes of queues no
drain could start (:class:`SqlMeta`, a part of every SQL backend: parts.MetaPart),
and those rows' names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from mq_cli.backends.plumbing import Executor, Tx


def pause_key(queue: str, kind: str = "paused") -> str:
    """The meta row of a paused queue (or of another ``kind`` of note): meta names
    hold 64 characters, queue names as many, so a long one is named by its hash
    (the value says which queue)."""
    if len(kind) + 1 + len(queue) <= 64:
        return f"{kind}:{queue}"
    import hashlib

    return f"{kind}#" + hashlib.sha256(queue.encode()).hexdigest()[:50]


class SqlMeta:
    """The meta table's reads and writes over a dialect's executor; ``now``: the
    database's clock (the operators' part has it)."""

    def __init__(self, db: Executor, now: Callable[[], datetime]) -> None:
        self.db = db
        self._now = now

    def clock_read(
        self, host_key: str
    ) -> tuple[datetime, datetime | None, str | None, str | None, str | None]:
        now, newest, seen, step, host = self.db._rows(self.db._sql["clock_read"], (host_key,))[0]
        return self.db._time(now), self.db._time(newest), seen, step, host  # type: ignore[return-value]

    def clock_step_read(self) -> tuple[datetime, str | None]:
        now, step = self.db._rows(self.db._sql["clock_step"])[0]
        return self.db._time(now), step  # type: ignore[return-value]

    def meta_put(self, values: dict[str, str]) -> None:
        def body(tx: Tx) -> None:
            for pair in values.items():
                tx.change(self.db._sql["meta_put"], pair)

        self.db._transaction(body)

    def meta_drop(self, names: Sequence[str]) -> int:
        def body(tx: Tx) -> int:
            return sum(tx.change(self.db._sql["meta_delete"], (name,)) for name in names)

        return self.db._transaction(body)

    # -- pauses (in the meta table, so they hold for every host) -------------------

    def paused(self) -> dict[str, str]:
        """{queue: since} for every paused queue (since: the database's time, text)."""
        return self.drain_notes()[0]

    def drain_notes(self) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        found: dict[str, str] = {}
        stuck: dict[str, tuple[str, str]] = {}
        for name, value in self.db._rows(self.db._sql["meta_notes"]):
            since, _, rest = str(value).partition("|")
            if str(name).startswith("paused"):
                found[rest] = since
            else:
                queue, _, error = rest.partition("|")
                stuck[queue] = (since, error)
        return found, stuck

    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pause or resume ``queue``; False when it already was so."""
        name = pause_key(queue)
        if not paused:
            return (
                self.db._transaction(lambda tx: tx.change(self.db._sql["meta_delete"], (name,))) > 0
            )
        if queue in self.paused():
            return False
        self.meta_put({name: f"{self._now().isoformat(timespec='seconds')}|{queue}"})
        return True

    def clock_repair_back(self) -> int:
        return self.db._transaction(lambda tx: tx.change(self.db._sql["clock_repair_back"]))
