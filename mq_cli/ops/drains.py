"""`mq stop DRAIN [--quiet]`: an operator's request to one live drain, on any host.

The request is stored in the drain's row of the run log (backends/sqlrunlog.py),
which the drain reads within its heartbeat interval (drain/requests.py says what
``stop`` and ``quiet`` do). A drain is named as `mq status` shows it: ``host:pid``
(the DRAIN column), or its owner token (``owner`` in `mq status --json`). Only a
live drain is asked: an unknown name, or one whose drain ended, is a usage error
(ConfigError, exit 2) that changes nothing.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mq_cli.core.errors import ConfigError
from mq_cli.core.models import Run
from mq_cli.core.states import Action
from mq_cli.host import runlog
from mq_cli.host.runlog import LIVE_WITHIN
from mq_cli.ops.status import iso

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend

#: the longest name a drain is looked up by (a host name and a pid, or a token)
NAME_MAX = 300


@dataclass
class StopAsked:
    """What `mq stop` did: ``kind`` ("stop" or "quiet") asked of ``run`` by ``by``;
    ``already``: a quiet request to a drain asked to stop before, which changes nothing."""

    run: Run
    kind: Action
    by: str
    already: str | None = None

    @property
    def name(self) -> str:
        return f"{self.run.host}:{self.run.pid}"

    def to_json(self) -> dict[str, Any]:
        return {
            "drain": self.name,
            "owner": self.run.owner,
            "run": self.run.id,
            "queue": self.run.queue,
            "request": self.kind,
            "by": self.by,
            "already": self.already,
        }

    def text(self) -> str:
        if self.already is not None:
            return f"drain {self.name} was asked to stop already (by {self.already}): it stops"
        if self.kind == Action.QUIET:
            what = "end quietly: it claims nothing more and ends once what it claimed has run"
        else:
            what = (
                "stop, as on SIGTERM: its running handler finishes, what it claimed and did "
                "not start goes back to ready"
            )
        return f"asked drain {self.name} (queue {self.run.queue or '-'}) to {what}"


def default_by() -> str:
    """Who asks, when the caller does not say: this user at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def matches(run: Run, name: str) -> bool:
    owner = run.owner.removesuffix(":L")  # liveness.LIVE_MARK: its lock's mark
    return name in (f"{run.host}:{run.pid}", run.owner, owner)


def find(backend: Backend, name: str) -> Run:
    """The live drain called ``name``; ConfigError naming what is live otherwise."""
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise ConfigError("name a drain as `mq status` shows it: host:pid (or its owner token)")
    unreadable = runlog.problem(backend)
    if unreadable is not None:
        raise unreadable
    now = backend.now().timestamp()
    live = backend.runs_live(now - LIVE_WITHIN)
    dead = backend.dead_owners([r.owner for r in live]) if live else set()
    live = [r for r in live if r.owner not in dead]
    found = [r for r in live if matches(r, name)]
    if found:
        return max(found, key=lambda r: (r.started_at, r.id))  # a pid reused: the newest
    for run in backend.runs_recent(200):
        if matches(run, name):
            when = "ended at " + str(iso(run.ended_at)) if run.ended_at else "is gone"
            code = "" if run.exit_code is None else f" (exit {run.exit_code})"
            raise ConfigError(f"drain {name} {when}{code}: there is nothing to stop")
    names = ", ".join(f"{r.host}:{r.pid}" for r in live) or "none"
    raise ConfigError(f"no live drain is named {name!r} (`mq status`); live drains: {names}")


def ask(backend: Backend, name: str, quiet: bool = False, by: str | None = None) -> StopAsked:
    """Ask the live drain ``name`` to stop (or ``quiet``-ly end); see the module's doc."""
    run = find(backend, name)
    kind = Action.QUIET if quiet else Action.STOP
    by = (by or default_by())[:NAME_MAX]
    if backend.run_ask_stop(run.id, kind, by, backend.now().timestamp()):
        return StopAsked(run, kind, by)
    if quiet and run.stop_request == Action.STOP:
        return StopAsked(run, kind, by, already=run.stop_by or "someone")
    raise ConfigError(f"drain {name} ended meanwhile: there is nothing to stop")
