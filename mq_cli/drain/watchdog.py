"""The drain's watchdog thread: it renews the running handler's lease and fences a
handler whose drain lost its database session (see backends/liveness.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mq_cli.backends.liveness import FENCE, STALE_WAKE, WATCH_EVERY


class Watchdog:
    """A thread of the drain's that acts while a batch runs, even when the main
    thread cannot (a query stuck on a dead socket, a handler's long wait):

    - ``keep(now)`` every WATCH_EVERY: renews the handler's lease (guard.py), so
      the lease ends soon after this thread stops, that is, after the drain does;
    - with ``fence``: stops the running handler when the drain's session went
      unproven for ``fence`` seconds (``stop`` must be safe from another thread:
      the runners' kill only sends a signal).
    """

    def __init__(
        self,
        proof: Callable[[], float],
        stop: Callable[[], None],
        fence: float | None = FENCE,
        keep: Callable[[float], None] | None = None,
    ):
        self.proof = proof
        self.stop_handler = stop
        self.fence = fence
        self.keep = keep
        self.fired = False
        self.woke_late_at = 0.0  # time.monotonic() when it last found itself stopped or starved
        # A plain flag, not an Event: the drain arms it per batch, and waking
        # this thread each time would cost a batch of one a GIL hand-over.
        self.armed = False
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mq-fence", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def stopped_since(self, since: float) -> bool:
        """Whether this process was stopped or starved (past STALE_WAKE) after ``since``."""
        return self.woke_late_at >= since

    def close(self) -> None:
        self._quit.set()
        self._thread.join(timeout=1.0)

    def _watch(self) -> None:
        previous = resumed = time.monotonic()
        while not self._quit.wait(WATCH_EVERY):
            now = time.monotonic()
            if now - previous > STALE_WAKE:
                # This thread did not run for a while: the process was stopped
                # (SIGSTOP, a frozen VM) or starved, the main thread with it. Its
                # session may well be alive: give it FENCE to show so. (The guard
                # has stopped a handler that ran meanwhile: see guard.py.)
                resumed = self.woke_late_at = now
            previous = now
            if not self.armed:
                continue
            if self.keep is not None:
                self.keep(now)
            if self.fence is not None and now - max(self.proof(), resumed) >= self.fence:
                self.fired = True
                self.stop_handler()
                self.armed = False
