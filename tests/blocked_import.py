"""A handler module whose import never ends in the handler's child: it marks that
it began (in the file named by MQ_TEST_IMPORTING) and waits, as a slow app's
import on a loaded machine. The drain's own check of the handler path (which
imports it too, in the drain) goes through at once."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.handlers import step

if "mq_cli.drain.loop" not in sys.modules:
    Path(os.environ["MQ_TEST_IMPORTING"]).write_text(str(os.getpid()))
    time.sleep(600)

__all__ = ["step"]
