"""The console's search across every queue: by message id, unique key, or error text.

A query that is a message id (ASCII digits, within a BIGINT) finds that message;
the query as a unique key is looked up exactly in every queue (one index lookup
per queue: the configured ones and those holding a row, up to :data:`MAX_QUEUES`);
and every live
message whose last_error holds the query (any case) is found by walking the
table by id, at most :data:`BUDGET` rows per request, in SQL. A search that used
its budget before the table's end says so (``stopped_early``) and where the next
request goes on (``next_after``), as the queue page's filter does (ops/browse.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq_cli.backends.base import Backend
from mq_cli.core.config import Config
from mq_cli.core.errors import ConfigError
from mq_cli.core.models import Message, listed_json, message_state
from mq_cli.core.states import State, Stored

#: rows an error search looks at per request
BUDGET = 20_000
#: results per request at most
LIMIT = 50
#: the longest query, in characters
MAX_QUERY = 500
#: queues a unique key is looked up in at most
MAX_QUEUES = 1000
#: the largest message id (a BIGINT)
MAX_ID = (1 << 63) - 1
MATCHES = ("id", "unique_key", "error")


@dataclass(frozen=True)
class Hit:
    message: Message
    state: State
    match: str  # one of MATCHES: how it was found

    def to_json(self) -> dict[str, object]:
        return {**listed_json(self.message, self.state, None), "match": self.match}


@dataclass
class Found:
    query: str
    results: list[Hit] = field(default_factory=list)
    #: where the error search goes on (the next request's ``after``); None: it is done
    next_after: int | None = None
    #: the error search stopped before the table's end (its budget of rows, or a full page)
    stopped_early: bool = False
    looked_at: int = 0  # rows the error search looked at

    def to_json(self) -> dict[str, object]:
        return {
            "q": self.query, "results": [hit.to_json() for hit in self.results],
            "next_after": self.next_after, "stopped_early": self.stopped_early,
            "looked_at": self.looked_at,
        }  # fmt: skip


def check_query(query: str) -> str:
    """The query, or ConfigError (a 400) for one no database could be asked."""
    if len(query) > MAX_QUERY:
        raise ConfigError(f"the search text is {len(query)} characters: at most {MAX_QUERY}")
    if "\x00" in query:
        raise ConfigError("the search text cannot hold a NUL character")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError("the search text is not valid UTF-8") from exc
    return query


def message_id(text: str) -> int | None:
    """``text`` as a message id: ASCII digits naming a BIGINT above 0; else None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    ident = int(text)
    return ident if 0 < ident <= MAX_ID else None


def search(
    config: Config,
    backend: Backend,
    query: str,
    after: int = 0,
    budget: int = BUDGET,
    limit: int = LIMIT,
) -> Found:
    """Messages of any queue that ``query`` names; the error search from id ``after``."""
    check_query(query)
    found = Found(query)
    if not query.strip():
        return found
    hits: list[tuple[Message, str]] = []
    if after == 0:  # the exact matches come with the first page
        ident = message_id(query)
        if ident is not None:
            hits += [(m, "id") for m in backend.search_ids([ident])]
        for queue in _queues(config, backend):
            hits += [(m, "unique_key") for m in backend.search_key(queue, query)]
    end, looked_at = backend.search_window(after, budget)
    found.looked_at = looked_at
    if end is not None:
        matched = backend.search_error(after, end, query, limit)
        hits += [(m, "error") for m in matched]
        if len(matched) >= limit:  # a full page: the rest of the window goes next
            found.next_after, found.stopped_early = matched[-1].id, True
        elif looked_at >= budget:
            found.next_after, found.stopped_early = end, True
    found.results = _with_states(config, backend, hits)
    return found


def _queues(config: Config, backend: Backend) -> list[str]:
    """Every queue a key may be in: those holding a row (found by a loose index scan,
    not by counting the table) and the configured ones."""
    return sorted(set(config.queues) | set(backend.search_queues(MAX_QUEUES)))


def _with_states(config: Config, backend: Backend, hits: list[tuple[Message, str]]) -> list[Hit]:
    now = backend.now()
    dead = backend.dead_owners([m.owner for m, _ in hits if m.status == Stored.PROCESSING])
    seen: set[int] = set()
    results = []
    for m, how in hits:
        if m.id in seen:  # found by id or key and by its error too: said once
            continue
        seen.add(m.id)
        stalled_after = config.queue(m.queue).stalled_after
        state = message_state(
            m.status, m.available_at, m.heartbeat_at, m.owner in dead, now, stalled_after
        )
        results.append(Hit(m, state, how))
    return results
