"""The runner each queue's handlers run in, the first one launched early.

A Python handler's child takes ~30 ms to start Python, and the drain spends
longer than that connecting to its database before its first claim. So the
first queue's runner is launched at the start, its child's Python starting
while the drain connects, and handed to that queue when it is drained. The
child imports the handler only at the first message (worker.py: Worker.load):
a drain that never gets there (nothing to run, the queue paused or busy, a
stop) ends it unused, the handler's module imported only by the drain's own
check of the path (startfail.plan), not a second time in a child killed mid-way.
"""

from __future__ import annotations

import logging

from mq_cli.core.config import Config, QueueConfig
from mq_cli.runners import make_runner
from mq_cli.runners.runner import Runner

log = logging.getLogger("mq")


class Launcher:
    def __init__(self, config: Config) -> None:
        self._hide = config.database.secret_env()
        self._early: tuple[str, Runner] | None = None

    def launch(self, queue: QueueConfig, path: str) -> None:
        """Start ``queue``'s runner now, without waiting for it."""
        self.close()
        runner = make_runner(path, queue.format, self._hide)
        try:
            runner.launch()
        except OSError as exc:  # no process to be had now: the first batch tries, and says
            log.debug("queue %s: handler not launched early: %s", queue.name, exc)
            runner.close()
            return
        self._early = (queue.name, runner)

    def runner(self, queue: QueueConfig, path: str) -> Runner:
        """The runner for ``queue``: the one launched for it, else a new one (one
        launched for another queue is ended)."""
        early, self._early = self._early, None
        if early is not None and early[0] == queue.name:
            return early[1]
        if early is not None:
            early[1].close()
        return make_runner(path, queue.format, self._hide)

    def close(self) -> None:
        """End the runner launched and not handed out, if any."""
        early, self._early = self._early, None
        if early is not None:
            early[1].close()
