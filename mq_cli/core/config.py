"""Configuration: YAML file + environment + flags -> frozen dataclasses.

Every validation error names the key and, when it came from a file, the file
and line, and raises ConfigError (exit 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mq_cli.core import dburl
from mq_cli.core.dbconfig import database_settings, world_readable_warning
from mq_cli.core.dburl import DatabaseSettings, parse_database_url
from mq_cli.core.durations import parse_duration
from mq_cli.core.errors import ConfigError
from mq_cli.core.keys import QUEUE_KEYS, TOP_KEY_TABLE
from mq_cli.core.yamldoc import Located, read_yaml

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# 57, not 64: MySQL caps identifiers at 64 and mq names the index `<table>_unique`.
SQL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,56}$")


@dataclass(frozen=True)
class QueueConfig:
    """Settings of one queue; every field but ``name`` and ``handler`` has a default."""

    name: str = ""
    handler: str | None = None
    format: str = "json"
    max_errors: int = 10
    retry_delay: float = 30.0
    retry_delay_max: float = 3600.0
    stalled_after: float = 3600.0
    timeout: float = 600.0
    batch_size: int = 10
    concurrency: int = 1
    max_drains: int | None = None  # drains of the queue at once across every host (host/fleet.py)
    rate_limit: float | None = None  # handler starts per second across every host (ratelimit.py)
    unique_retention: float = 0.0
    requeue_stalled: bool = False  # `mq drain` requeues the queue's stalled messages first
    group_ack: bool = False  # delete a batch's successes in one statement (see README)
    ack_delay: float = 0.02  # group_ack: the longest a success waits for its group's DELETE
    quiet_retries: bool = False  # a failure that will be retried is logged only with -v
    notify: bool = True  # PostgreSQL: each enqueue NOTIFYs waiting drains on any host
    on_stalled: str | None = None  # callback for `mq gc --stalled --notify`
    on_failed: str | None = None  # callback for `mq gc --errors --notify`

    def backoff(self, error_count: int) -> float:
        """Seconds to wait before the next try after ``error_count`` failures (>= 1)."""
        exponent = min(max(error_count - 1, 0), 60)
        return float(min(self.retry_delay * (2**exponent), self.retry_delay_max))


TOP_KEYS = tuple(key.name for key in TOP_KEY_TABLE)


@dataclass(frozen=True)
class Config:
    database: DatabaseSettings
    table: str = "mq_messages"
    lock_dir: str = ""
    #: how long the run log (mq status) keeps drain runs; 0: drains record nothing
    run_log_retention: float = 7 * 86400.0
    defaults: QueueConfig = field(default_factory=QueueConfig)
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    source: str | None = None  # the file it came from, if any
    warnings: tuple[str, ...] = ()
    #: the `web:` section as written, for the console (mq_cli/web/settings.py parses it)
    web: Any = None
    #: where a key path is in the file ("mq.yaml, line 7: web.users"), for its errors
    where: Callable[[tuple[str, ...]], str] | None = field(default=None, compare=False, repr=False)

    def queue(self, name: str) -> QueueConfig:
        """The configured queue, or the defaults for a queue the config does not name."""
        validate_queue_name(name)
        return self.queues.get(name) or replace(self.defaults, name=name)


def validate_queue_name(name: str) -> str:
    # fullmatch, not match: `$` also matches before a trailing newline ("abc\n").
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ConfigError(f"invalid queue name {name!r}: use 1-64 characters of A-Z a-z 0-9 _ . -")
    return name


def validate_table_name(name: object, where: str = "table") -> str:
    # fullmatch: the name is pasted into SQL, so a trailing newline must not slip through.
    if not isinstance(name, str) or not SQL_IDENTIFIER.fullmatch(name):
        raise ConfigError(
            f"{where}: invalid table name {name!r}: use a letter or _ then up to 56 of "
            "A-Z a-z 0-9 _"
        )
    return name


def default_lock_dir() -> str:
    """$XDG_RUNTIME_DIR/mq, else $XDG_STATE_HOME/mq/locks (~/.local/state/mq/locks).

    Never in shared /tmp: there another user can create /tmp/mq-<uid> first, and
    every drain (cron sets no XDG_RUNTIME_DIR) would refuse it and exit 2.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "mq")
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state_home, "mq", "locks")


def find_config_file(explicit: str | None) -> str | None:
    """The config file to read, by the documented lookup order; None = built-in defaults."""
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"config file {explicit} not found (from --config or MQ_CONFIG)")
        return explicit
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(
        os.path.expanduser("~"), ".config"
    )
    for candidate in (
        "mq.yaml",
        os.path.join(config_home, "mq", "config.yaml"),
        "/etc/mq/config.yaml",
    ):
        if os.path.isfile(candidate):
            return candidate
    return None


def _queue_settings(
    raw: Any, path: tuple[str, ...], base: QueueConfig, doc: Located
) -> QueueConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise doc.error(path, "expected a mapping of queue settings")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        parse = QUEUE_KEYS.get(key)
        if parse is None:
            raise doc.error((*path, key), f"unknown key (valid: {', '.join(QUEUE_KEYS)})")
        try:
            values[key] = parse(value)
        except ValueError as exc:
            raise doc.error((*path, key), str(exc)) from None
    result = replace(base, **values)
    if result.retry_delay_max < result.retry_delay:
        raise doc.error((*path, "retry_delay_max"), "must not be smaller than retry_delay")
    return result


def load_config(config_path: str | None = None, database_url: str | None = None) -> Config:
    """Read the config by the lookup order; ``database_url`` overrides the file's database."""
    source = find_config_file(config_path)
    data: dict[str, Any] = {}
    doc = Located(source or "<defaults>")
    if source:
        data, doc = read_yaml(source)
    for key in data:
        if key not in TOP_KEYS:
            raise doc.error((key,), f"unknown key (valid: {', '.join(TOP_KEYS)})")

    if database_url:
        database = parse_database_url(database_url)
        configured = data.get("database")
        if isinstance(configured, dict) and isinstance(configured.get("password_env"), str):
            # Overridden, but still a secret the operator named: keep it from handlers.
            database = replace(database, password_env=configured["password_env"])
    elif data.get("database") is not None:
        database = database_settings(data["database"], doc)
    else:
        database = next(f.zero_config for f in dburl.forms() if f.zero_config)()

    table = data.get("table", "mq_messages")
    validate_table_name(table, doc.where(("table",)))
    lock_dir = data.get("lock_dir") or default_lock_dir()
    if not isinstance(lock_dir, str):
        raise doc.error(("lock_dir",), "expected a directory path")

    retention = 7 * 86400.0
    if data.get("run_log_retention") is not None:
        try:
            retention = parse_duration(data["run_log_retention"])
        except ValueError as exc:
            raise doc.error(("run_log_retention",), str(exc)) from None
    defaults = _queue_settings(data.get("defaults"), ("defaults",), QueueConfig(), doc)
    raw_queues = data.get("queues") or {}
    if not isinstance(raw_queues, dict):
        raise doc.error(("queues",), "expected a mapping of queue name to settings")
    queues: dict[str, QueueConfig] = {}
    for name, raw in raw_queues.items():
        if not QUEUE_NAME.fullmatch(name):
            raise doc.error(
                ("queues", name), "invalid queue name: use 1-64 characters of A-Z a-z 0-9 _ . -"
            )
        queues[name] = _queue_settings(raw, ("queues", name), replace(defaults, name=name), doc)

    return Config(
        database=database,
        table=table,
        lock_dir=os.path.expanduser(lock_dir),
        run_log_retention=retention,
        defaults=defaults,
        queues=queues,
        source=source,
        warnings=world_readable_warning(source, data) if source else (),
        web=data.get("web"),
        where=doc.where,
    )
