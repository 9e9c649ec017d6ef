"""A handler module whose import takes 2 s, as a large app's may on a loaded machine."""

from __future__ import annotations

import time

from tests.handlers import step

time.sleep(2.0)

__all__ = ["step"]
