"""Clock steps of the database's clock, and what stalled detection does about them.

"Stalled" compares a heartbeat with the database's now. A step of that clock
(an operator's `date -s`, a VM restored from a snapshot, NTP stepping instead
of slewing) breaks the comparison: forward, every held message looks stalled at
once and gc would hand it to a second drain while the first still runs it; back,
a fresh message looks delayed for the step's size.

How a step is seen: every drain start, drain heartbeat and `mq gc --stalled`
records in ``<table>_meta``, per host, the database's now with the host's boot
id and uptime (the kernel's boot clock, which no clock step moves). The next
record from the same host compares the two elapsed times: a difference beyond
:data:`TOLERANCE` is a step. A newest message or a last record from the future
is a step back, whichever host looks. A step is kept as ``clock_step``.

What follows: for ``stalled_after`` after a step no message of that queue is
stalled (every live drain heartbeats within stalled_after/3, so by then each
live message carries a heartbeat in the new clock's terms); after a step back,
ready messages created "in the future" are moved back to now, delay kept.

The assumption (README, Guarantees): between steps the database's clock
advances at the rate of the hosts' boot clocks (NTP slewing is within
:data:`RATE`); a forward step that no host with an earlier record of the same
boot observes (e.g. every mq host rebooted at once) is not detected.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from mq_cli.backends.base import Backend
from mq_cli.core.errors import DatabaseError

log = logging.getLogger("mq")

#: seconds of disagreement tolerated between the database's clock and a boot clock
TOLERANCE = 2.0
#: ... plus this fraction of the elapsed time (NTP slews at most 0.05 %)
RATE = 0.001


@dataclass(frozen=True)
class ClockState:
    now: datetime
    #: the database's now when the latest step was seen (None: never)
    step_at: datetime | None

    def stalled_resumes(self, stalled_after: float) -> datetime | None:
        """When stalled detection with this bound trusts the clock again; None: it does now."""
        if self.step_at is None:
            return None
        resumes = self.step_at + timedelta(seconds=stalled_after)
        return resumes if self.now < resumes else None


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).replace(tzinfo=None).isoformat(sep=" ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.split("|")[0]).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _boot() -> tuple[str, float] | None:
    """This host's boot id and seconds since boot (Linux); None elsewhere."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot_id = handle.read().strip()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return boot_id, uptime


def host_key() -> str:
    return "clock:" + socket.gethostname()[:58]


def _drift(record: str | None, now: datetime, boot: tuple[str, float] | None) -> float | None:
    """Seconds the database's clock moved beyond this host's boot clock since ``record``."""
    parts = (record or "").split("|")
    if boot is None or len(parts) != 3 or parts[1] != boot[0]:
        return None  # no record, another boot, or no boot clock: nothing to compare
    then = _parse(parts[0])
    if then is None:
        return None
    real = boot[1] - float(parts[2])
    drift = (now - then).total_seconds() - real
    return drift if abs(drift) > TOLERANCE + RATE * abs(real) else None


def observe(backend: Backend) -> ClockState:
    """Record the database's now for this host; detect (and record) a step since the last."""
    key = host_key()
    now, newest, seen, step_text, record = backend.clock_read(key)
    boot = _boot()
    step = _drift(record, now, boot)
    ahead = [t for t in (_parse(seen), newest) if t is not None]
    back = max((t - now).total_seconds() for t in ahead) if ahead else 0.0
    if step is None and back > TOLERANCE:
        step = -back
    values = {"clock_seen": _iso(now)}
    if boot is not None:
        values[key] = f"{_iso(now)}|{boot[0]}|{boot[1]:.2f}"
    step_at = _parse(step_text)
    if step is not None:
        step_at = now
        values["clock_step"] = f"{_iso(now)}|{step:+.3f}"
        log.warning(
            "the database's clock stepped %+.0f s (seen from %s): no message counts as "
            "stalled for stalled_after from now",
            step, key[6:],
        )  # fmt: skip
    backend.meta_put(values)
    if step is not None and step < 0:
        moved = backend.clock_repair_back()
        if moved:
            log.warning(
                "%d ready message(s) created before the step back made ready on time", moved
            )
    return ClockState(now, step_at)


def observe_quietly(backend: Backend) -> ClockState | None:
    """:func:`observe` where failing must not stop the work (a drain's heartbeat):
    without write access to the meta table, fall back to reading the last step."""
    try:
        return observe(backend)
    except DatabaseError as exc:
        log.debug("clock record not written: %s", exc)
    return read(backend)


def read(backend: Backend) -> ClockState | None:
    """The last recorded step, without writing anything (stats)."""
    try:
        now, step_text = backend.clock_step_read()
    except DatabaseError:
        return None
    return ClockState(now, _parse(step_text))
