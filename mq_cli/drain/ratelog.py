"""Log lines that could repeat many times a second (a drain reconnecting to a
server that keeps refusing it): at most one a second, the rest counted."""

from __future__ import annotations

import logging
import math
import time


class Throttled:
    """A logger's warnings, at most one per ``every`` seconds; the next line that
    passes says how many were held back meanwhile."""

    def __init__(self, logger: logging.Logger, every: float = 1.0):
        self.logger = logger
        self.every = every
        self.last = -math.inf
        self.held = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.held += 1
            return
        if self.held:
            message += " (%d similar line(s) held back)"
            args = (*args, self.held)
        self.last, self.held = now, 0
        self.logger.warning(message, *args)
