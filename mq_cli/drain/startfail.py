"""Queues no drain could start: checked before anything is claimed, and a trace
in the database for `mq status`.

A drain that cannot start (its handler does not import, the queue has no
handler in the config, a bad ``--handler``) exits 2 before it claims anything,
and cron mails that to one host's owner at best. So, when the database is
reachable, it also leaves a note in the meta table: the queue, since when no
drain could start it, and the last error. `mq status` shows it until a drain
of the queue starts (loop.py removes the note then, from what it reads as it
starts anyway: no query more for a healthy drain).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from mq_cli.backends.meta import pause_key
from mq_cli.core.errors import ConfigError, MqError
from mq_cli.runners import paths

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config, QueueConfig
    from mq_cli.drain.report import DrainOptions

log = logging.getLogger("mq")

KIND = "nostart"
#: the meta table's value column holds 255 characters
VALUE_WIDTH = 255


def note_name(queue: str) -> str:
    return pause_key(queue, KIND)


def plan(
    config: Config, options: DrainOptions, open_backend: Callable[[], Backend]
) -> list[tuple[QueueConfig, str]]:
    """Each queue to drain with its handler, every handler checked before anything is
    claimed; a queue that cannot start is noted (:func:`record`) and raises ConfigError."""
    names = options.queues or list(config.queues)
    if not names:
        raise ConfigError(
            "no queue to drain: give -q QUEUE, or configure queues (see config.example.yaml)"
        )
    planned = []
    for name in names:
        queue = config.queue(name)
        path = options.handler or queue.handler
        try:
            if not path:
                where = config.source or "no config file"
                raise ConfigError(
                    f"queue {name!r} has no handler ({where}): set queues.{name}.handler "
                    "in the config or pass --handler"
                )
            paths.resolve(path)
        except ConfigError as exc:  # seen in `mq status`, not only in one host's mail
            record(config, open_backend, name, str(exc))
            raise
        planned.append((queue, str(path)))
    return planned


def record(config: Config, open_backend: Callable[[], Backend], queue: str, error: str) -> None:
    """Note that no drain of ``queue`` could start; quietly nothing when the database
    cannot be reached or holds no mq schema (nothing is created for it)."""
    path = config.database.path
    if path is not None and not os.path.exists(path):  # a file database not made yet
        return
    try:
        backend = open_backend()
        since = backend.drain_notes()[1].get(queue, (None, ""))[0]
        since = since or backend.now().isoformat(timespec="seconds").replace("+00:00", "Z")
        line = " ".join(error.split("\n", 1)[0].split())
        value = f"{since}|{queue}|{line}"[:VALUE_WIDTH]
        backend.meta_put({note_name(queue): value})
    except MqError as exc:
        log.debug("no trace of the failed start left in the database: %s", exc)


def clear(db: Callable[..., Any], queues: Iterable[str]) -> None:
    """A drain of ``queues`` started: their notes go. ``db`` runs an operation (the
    drain's, with its reconnects); a user who may not delete meta rows leaves them
    (see the GRANTs in the README) and the drain carries on."""
    names = [note_name(queue) for queue in queues]
    try:
        db(lambda backend: backend.meta_drop(names))
    except MqError as exc:
        log.warning("could not clear the note that no drain could start %s: %s", names, exc)
