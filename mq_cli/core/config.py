"""Configuration: YAML file + environment + flags -> frozen dataclasses.

Every validation error names the key and, when it came from a file, the file
and line, and raises ConfigError (exit 2).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml


from mq_cli.core import dburl
from mq_cli.core.dburl import DatabaseSettings, parse_database_url
from mq_cli.core.durations import parse_duration
from mq_cli.core.errors import ConfigError
from mq_cli.core.keys import DATABASE_KEY_TABLE, QUEUE_KEYS, TOP_KEY_TABLE

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
    max_drains: int | None = None  # drains of the queue at once across every host (fleet.py)
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
DATABASE_KEYS = tuple(key.name for key in DATABASE_KEY_TABLE)


def database_kinds() -> dict[str, str]:
    """The mapping's ``kind`` (without a url) -> the dialect it means (each registers its own)."""
    return {name: f.kind for f in dburl.forms() for name in f.mapping_kinds}


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


class _Located:
    """A YAML document as plain values plus the line of every key path."""

    def __init__(self, source: str):
        self.source = source
        self.lines: dict[tuple[str, ...], int] = {}
        self._constructor: yaml.constructor.SafeConstructor | None = None

    @property
    def constructor(self) -> yaml.constructor.SafeConstructor:
        # Made on first use: with no config file, yaml is never imported (~10 ms).
        if self._constructor is None:
            import yaml

            self._constructor = yaml.constructor.SafeConstructor()
        return self._constructor

    def where(self, path: tuple[str, ...]) -> str:
        key = ".".join(path)
        # A missing key (database.database) has no line: name the mapping that lacks it.
        lines = (self.lines.get(path[:n]) for n in range(len(path), 0, -1))
        line = next((n for n in lines if n), None)
        return f"{self.source}, line {line}: {key}" if line else f"{self.source}: {key}"

    def error(self, path: tuple[str, ...], message: str) -> ConfigError:
        return ConfigError(f"{self.where(path)}: {message}")

    def convert(self, node: yaml.Node, path: tuple[str, ...]) -> Any:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = str(self.constructor.construct_object(key_node, deep=True))
                child = (*path, key)
                if key in result:
                    self.lines[child] = key_node.start_mark.line + 1
                    raise self.error(child, "duplicate key")
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.convert(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, str(i))) for i, item in enumerate(node.value)]
        return self.constructor.construct_object(node, deep=True)


def _read_yaml(path: str) -> tuple[dict[str, Any], _Located]:
    import yaml  # only when there is a file: keeps the zero-config start fast

    located = _Located(path)
    try:
        with open(path, encoding="utf-8") as handle:
            node = yaml.compose(handle, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f", line {mark.line + 1}" if mark else ""
        # An unclosed bracket or quote is noticed lines later (even past the
        # end); the context mark says where the construct started.
        started = ""
        if exc.context and exc.context_mark and (not mark or exc.context_mark.line != mark.line):
            started = f" ({exc.context}, started on line {exc.context_mark.line + 1})"
        raise ConfigError(f"{path}{line}: invalid YAML: {exc.problem}{started}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if node is None:
        return {}, located
    try:
        data = located.convert(node, ())
    except yaml.MarkedYAMLError as exc:  # a tag the safe loader refuses (!!python/name:...)
        mark = exc.problem_mark or exc.context_mark
        line = f", line {mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "unsupported value"
        raise ConfigError(f"{path}{line}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys (database, queues, ...)")
    return data, located


def _queue_settings(
    raw: Any, path: tuple[str, ...], base: QueueConfig, doc: _Located
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


def _read_secret_file(path: str, where: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read password file {path}: {exc.strerror}") from None


def _database_settings(raw: Any, doc: _Located) -> DatabaseSettings:
    path = ("database",)
    if isinstance(raw, str):
        try:
            return parse_database_url(raw)
        except ConfigError as exc:
            raise doc.error(path, str(exc)) from None
    if not isinstance(raw, dict):
        raise doc.error(path, "expected a URL or a mapping (url or host/port/user/database)")
    for key in raw:
        if key not in DATABASE_KEYS:
            raise doc.error((*path, key), f"unknown key (valid: {', '.join(DATABASE_KEYS)})")
    secrets = [k for k in ("password", "password_file", "password_env") if k in raw]
    if len(secrets) > 1:
        raise doc.error((*path, secrets[1]), f"give only one of {', '.join(secrets)}")
    if "url" in raw:
        try:
            settings = parse_database_url(str(raw["url"]))
        except ConfigError as exc:
            raise doc.error((*path, "url"), str(exc)) from None
        if "kind" in raw:
            raise doc.error((*path, "kind"), "give either url or kind (the url's scheme says it)")
    else:
        kinds = database_kinds()
        default = next((f.mapping_kinds[0] for f in dburl.forms() if f.mapping_default), "")
        kind = raw.get("kind", default)
        if kind not in kinds:
            raise doc.error((*path, "kind"), f"expected one of {', '.join(kinds)}")
        if not raw.get("database"):
            raise doc.error((*path, "database"), "missing: name the database")
        url_form = dburl.form(kinds[kind])
        settings = DatabaseSettings(kind=url_form.kind, port=url_form.default_port)
    changes: dict[str, Any] = {}
    # Keys that one dialect's mapping alone takes (PostgreSQL's sslmode, pooler).
    only = {key: f for f in dburl.forms() for key in f.mapping_only}
    for key, owner in only.items():
        if key not in raw:
            continue
        values, elsewhere = owner.mapping_only[key]
        if settings.kind != owner.kind:
            raise doc.error((*path, key), elsewhere)
        if raw[key] not in values:
            raise doc.error((*path, key), f"expected one of {', '.join(values)}")
        changes[key] = raw[key]
    for key in ("host", "user", "database", "unix_socket"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise doc.error((*path, key), "expected a string")
            changes[key] = raw[key]
    if "port" in raw:
        port = raw["port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise doc.error((*path, "port"), "expected a port number (1-65535)")
        changes["port"] = raw["port"]
    if "connect_timeout" in raw:
        try:
            changes["connect_timeout"] = parse_duration(raw["connect_timeout"])
        except ValueError as exc:
            raise doc.error((*path, "connect_timeout"), str(exc)) from None
    if "password" in raw:
        # YAML turns an unquoted 0123 into 83 and yes into True: str() of that
        # would be a wrong password that fails far from its cause.
        if not isinstance(raw["password"], str):
            raise doc.error((*path, "password"), "expected a string: put the password in quotes")
        changes["password"] = raw["password"]
    elif "password_file" in raw:
        changes["password"] = _read_secret_file(
            str(raw["password_file"]), doc.where((*path, "password_file"))
        )
    elif "password_env" in raw:
        name = str(raw["password_env"])
        if name not in os.environ:
            raise doc.error((*path, "password_env"), f"environment variable {name} is not set")
        changes["password"] = os.environ[name]
        changes["password_env"] = name
    if "ssl" in raw:
        ssl = raw["ssl"]
        if ssl is False:
            changes["ssl"] = False
        elif ssl is True:
            changes["ssl"] = True
        elif isinstance(ssl, dict):
            for key in ssl:
                if key not in ("ca", "verify"):
                    raise doc.error((*path, "ssl", key), "unknown key (valid: ca, verify)")
            verify = ssl.get("verify", True)
            if not isinstance(verify, bool):  # bool("no") would be True
                raise doc.error((*path, "ssl", "verify"), "expected true or false")
            ca = ssl.get("ca")
            if ca is not None and not (isinstance(ca, str) and os.path.isfile(ca)):
                raise doc.error((*path, "ssl", "ca"), f"CA file {ca!r} not found")
            changes["ssl"] = True
            changes["ssl_ca"] = ca
            changes["ssl_verify"] = verify
        else:
            raise doc.error((*path, "ssl"), "expected true, false or a mapping {ca, verify}")
    return replace(settings, **changes)


def _url_has_password(url: object) -> bool:
    # Not a ':' test: mysql://db1:3306/app has a port, not a password.
    try:
        from urllib.parse import urlsplit

        return isinstance(url, str) and urlsplit(url).password is not None
    except ValueError:
        return False


def _world_readable_warning(path: str, data: dict[str, Any]) -> tuple[str, ...]:
    database = data.get("database")
    if isinstance(database, dict):
        holds_password = "password" in database or _url_has_password(database.get("url"))
    else:
        holds_password = _url_has_password(database)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ()
    if holds_password and mode & (stat.S_IRGRP | stat.S_IROTH):
        return (
            f"{path} holds a database password and is readable by other users; "
            f"run: chmod 600 {path}",
        )
    return ()


def load_config(config_path: str | None = None, database_url: str | None = None) -> Config:
    """Read the config by the lookup order; ``database_url`` overrides the file's database."""
    source = find_config_file(config_path)
    data: dict[str, Any] = {}
    doc = _Located(source or "<defaults>")
    if source:
        data, doc = _read_yaml(source)
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
        database = _database_settings(data["database"], doc)
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
        warnings=_world_readable_warning(source, data) if source else (),
        web=data.get("web"),
        where=doc.where,
    )


def queue_setting_names() -> list[str]:
    """The keys a queue (or `defaults:`) accepts, for docs and their test."""
    return [f.name for f in fields(QueueConfig) if f.name != "name"]
