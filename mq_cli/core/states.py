"""The words mq's code talks about as types: a message's state, its stored status, an operator's verb.

Each is a ``(str, Enum)`` (Python 3.10 has no ``StrEnum``): a member *is* its
string, so JSON, the audit log, CLI choices and SQL parameters carry the same
bytes as before, while mypy flags ``State.PROCESING`` or a bare ``"procesing"``
passed where a :class:`State` is typed. ``str()`` and f-strings give the value
too (``__str__``/``__format__`` below: on 3.11+ an Enum's would give
``State.READY``). A string from outside (a CLI option, a form, a JSON body) is
parsed once at the edge with :meth:`Word.parse`, which says what it takes.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from mq_cli.core.errors import ConfigError

W = TypeVar("W", bound="Word")


class Word(str, Enum):
    """A member that prints, formats and compares as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls: type[W], text: str, what: str = "value") -> W:
        """The member whose value is ``text``; a ConfigError naming the choices if none."""
        try:
            return cls(text)
        except ValueError:
            choices = ", ".join(member.value for member in cls)
            raise ConfigError(f"{what} must be one of {choices}, not {text!r}") from None


class State(Word):
    """What every view calls a message now (`mq list --status`, `mq stats`, the console).

    Derived, not stored: ready splits into ready now and delayed (not due yet),
    processing into a live claim and a stalled one (no heartbeat, or its drain
    is gone). The order is the columns' order.
    """

    READY = "ready"
    DELAYED = "delayed"
    PROCESSING = "processing"
    STALLED = "stalled"
    FAILED = "failed"


class Stored(Word):
    """What the messages table's status column holds (and the SQL blocks write).

    DELAYED is a row not due when it was written (drains promote it to READY);
    DONE is a tombstone a unique key left (`mq purge` removes them). A user sees
    a stored delayed row as status ready (:data:`STATUSES`).
    """

    READY = "ready"
    DELAYED = "delayed"
    PROCESSING = "processing"
    FAILED = "failed"
    DONE = "done"


class Action(Word):
    """An operator's verb: the CLI command, the console's action and the audit line's ``action``.

    RETRY/DELETE act on ids or a filter, REQUEUE/DELETE are `mq gc`'s actions,
    REQUEUE_STALLED/REQUEUE_FAILED the console's requeue buttons, PURGE empties
    a queue, PAUSE/RESUME a queue's claims, STOP/QUIET what `mq stop` asks of a
    drain (the run log's stop request and the run's end reason). The console's
    audit log writes these and, for what it did or refused on its own,
    STOP_DRAIN/QUIET_DRAIN, LOGIN_FAILED, REFUSED and HOST_REFUSED.
    """

    RETRY = "retry"
    DELETE = "delete"
    REQUEUE = "requeue"
    REQUEUE_STALLED = "requeue-stalled"
    REQUEUE_FAILED = "requeue-failed"
    PURGE = "purge"
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    QUIET = "quiet"
    STOP_DRAIN = "stop-drain"
    QUIET_DRAIN = "quiet-drain"
    LOGIN_FAILED = "login-failed"
    REFUSED = "refused"
    HOST_REFUSED = "host-refused"


class Outcome(Word):
    """What became of a message a drain handled, as the run log counts it (`mq status`,
    the console's charts, the metrics): done (succeeded), or failed once (retried or
    now failed)."""

    DONE = "done"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: the statuses a user sees on a message (`mq list`'s status column)
STATUSES: tuple[Stored, ...] = (Stored.READY, Stored.PROCESSING, Stored.FAILED)
#: what `mq stats` counts and `mq list --status` takes
STATES: tuple[State, ...] = tuple(State)
#: a derived state -> the user status it splits from
STATE_STATUS: dict[State, Stored] = {State.DELAYED: Stored.READY, State.STALLED: Stored.PROCESSING}
#: the stored statuses of a live message (a tombstone is not one)
LIVE: tuple[Stored, ...] = (Stored.READY, Stored.DELAYED, Stored.PROCESSING, Stored.FAILED)
#: what `mq gc` finds: --stalled or --errors (failed)
GC_KINDS: tuple[State, ...] = (State.STALLED, State.FAILED)
#: what `mq gc` does to what it finds
GC_ACTIONS: tuple[Action, ...] = (Action.REQUEUE, Action.DELETE)
#: what `mq retry`/`mq delete` and the console's bulk actions do by id or filter
BY_ID: tuple[Action, ...] = (Action.RETRY, Action.DELETE)
#: what `mq stop` asks of a drain
STOP_KINDS: tuple[Action, ...] = (Action.STOP, Action.QUIET)
