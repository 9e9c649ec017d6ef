"""The configuration's keys: each queue key's parser and check (they name what
is wrong; config.py adds the key and the file's line), and the tables of every
key with its type, default and meaning, from which docs/gen_reference.py writes
the configuration reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mq_cli.core.durations import parse_duration
from mq_cli.core.payloads import FORMATS


# key -> (type check, parser) for the queue-level settings (also valid under `defaults:`)
def _positive_int(lo: int, hi: int):
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo} and {hi}, got {value}")
        return value

    return check


def _format(value: object) -> str:
    if value not in FORMATS:
        raise ValueError(f"must be one of {', '.join(FORMATS)}, got {value!r}")
    return str(value)


def _handler(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a handler such as package.module:function or exec:/path/cmd")
    return value.strip()


def _bool(value: object) -> bool:
    if not isinstance(value, bool):  # 1 or "false" (quoted) would be truthy surprises
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _optional_int(lo: int, hi: int):
    check = _positive_int(lo, hi)

    def optional(value: object) -> int | None:
        return None if value is None else check(value)

    return optional


#: a rate's unit -> its seconds
RATE_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
              "hour": 3600.0}  # fmt: skip


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")


def parse_rate(value: object) -> float | None:
    """``20/s``, ``600/min``, ``5/h`` -> starts per second; None (YAML ``null``): no limit."""
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if not match or match.group(2) not in RATE_UNITS:
        raise ValueError(f"expected a rate such as 20/s, 600/min or 5/h, got {value!r}")
    per_second = float(match.group(1)) / RATE_UNITS[match.group(2)]
    if not 0 < per_second <= 1_000_000:
        raise ValueError(f"must be more than 0 and at most 1000000/s, got {value!r}")
    return per_second


def format_rate(per_second: float) -> str:
    """A rate as the config would say it: ``20/s``, ``600/min`` -> ``10/s``, ``5/h``."""
    for unit, seconds in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        count = per_second * seconds
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}/{unit}"
    return f"{per_second * 3600:g}/h"


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


@dataclass(frozen=True)
class Key:
    """One configuration key, as the parser takes it and the reference shows it.

    docs/gen_reference.py writes docs/reference/config.md from these tables,
    so what the parser accepts and what the docs say come from one place.
    """

    name: str
    type: str  # what the value is, in the docs' words
    doc: str  # what it means (Markdown; links are relative to docs/reference/)
    parse: Any = None  # queue keys: the value's parser and check
    default: str | None = None  # as the docs show it; None: QueueConfig's default


_FLEET = "../operating/fleet-limits.md"

#: the queue-level settings (also valid under `defaults:`), in the reference's order
QUEUE_KEY_TABLE: tuple[Key, ...] = (
    Key(
        "handler",
        "handler path",
        "what runs each message (see [Handlers](../handlers.md)): "
        "`package.module:function`, `:Class`, `:Class.method` or `exec:COMMAND ARGS...`; "
        "`mq drain` of a queue without one (and no `--handler`) is exit 2",
        _handler,
    ),
    Key(
        "format",
        "`json`, `text` or `bytes`",
        "what enqueue accepts and a Python handler receives",
        _format,
    ),
    Key(
        "max_errors",
        "whole number, 1-1000000",
        "failures before a message becomes `failed`",
        _positive_int(1, 1_000_000),
    ),
    Key(
        "retry_delay",
        "duration",
        "wait after the first failure; doubles per failure",
        parse_duration,
    ),
    Key("retry_delay_max", "duration", "longest wait between tries", parse_duration),
    Key(
        "stalled_after",
        "duration, > 0",
        "a `processing` message without a heartbeat this long is `stalled`, where its "
        "drain's lock cannot tell sooner (never within `stalled_after` after a clock step: "
        "see [Guarantees](../guarantees.md))",
        _positive_duration,
    ),
    Key("timeout", "duration", "handler time limit; `0` = none", parse_duration),
    Key(
        "batch_size",
        "whole number, 1-10000",
        "messages claimed per transaction",
        _positive_int(1, 10_000),
    ),
    Key(
        "concurrency",
        "whole number, 1-256",
        "drains of the queue allowed at once on one host",
        _positive_int(1, 256),
    ),
    Key(
        "max_drains",
        "whole number, 1-1000, or none",
        f"drains of the queue allowed at once across every host (see [Fleet limits]({_FLEET})); "
        "a drain that finds them all busy exits 0 and reports the queue under `busy`, as for "
        "`concurrency`",
        _optional_int(1, 1000),
    ),
    Key(
        "rate_limit",
        "rate (`20/s`, `600/min`, `5/h`) or none",
        f"handler starts of the queue across every host (see [Fleet limits]({_FLEET}))",
        parse_rate,
    ),
    Key(
        "unique_retention",
        "duration",
        "after a message with `--unique-key` succeeds, keep its key this long so the same key "
        "is still skipped (idempotent submission; with 0 a keyed retry after a lost COMMIT "
        "may store again, and mq advises none); expired keys are purged by drain",
        parse_duration,
    ),
    Key(
        "requeue_stalled",
        "boolean",
        "`true`: each `mq drain` of the queue first requeues its stalled messages, as `mq gc "
        "--stalled --requeue` would (each counts as a failure), and says so on stderr",
        _bool,
    ),
    Key(
        "group_ack",
        "boolean",
        "`true`: delete the successes of a claimed batch in one statement instead of one per "
        "message — several times faster on MariaDB (one log flush per group); the group is "
        "committed at the end of the batch, with the next claim (one commit for both; on "
        "PostgreSQL one statement), or as soon as its oldest success has waited `ack_delay`, "
        "so a slow handler never holds back the results before it; on PostgreSQL and MariaDB, "
        "while quick handlers run a batch, the next claim is already on its way (a drain then "
        "holds the next batch too, not started); the trade-off: if the drain dies, the "
        "successes not yet committed run again (at most `batch_size`, twice that on "
        "PostgreSQL and MariaDB, at most `ack_delay` old)",
        _bool,
    ),
    Key(
        "ack_delay",
        "duration",
        "with `group_ack`: the longest a success waits for its group's `DELETE` (the drain "
        "looks at least that often, even while a handler runs); `0`: one `DELETE` per success",
        parse_duration,
    ),
    Key(
        "quiet_retries",
        "boolean",
        "`true`: a failure that will be retried is logged only with `-v`, so cron mails only "
        "the messages that failed for good (now `failed`, after `max_errors` attempts); the "
        "attempts are still recorded (`error_count`, `last_error`)",
        _bool,
    ),
    Key(
        "notify",
        "boolean",
        "PostgreSQL: each enqueue of ready messages sends a `NOTIFY` in its transaction, so "
        "waiting drains on any host start them at once; `false`: they find them at their next "
        "poll, within a second. Measured cost (`bench/experiments/postgres_notify.py`, 4 producers "
        "committing one message each): 13–22 % of the enqueue rate",
        _bool,
    ),
    Key(
        "on_stalled",
        "handler path",
        "callback for `mq gc --stalled --notify`: a handler path (Python or `exec:`) called "
        "once per queue with the stalled messages (see [When something is stuck]"
        "(../operating/stuck.md))",
        _handler,
    ),
    Key(
        "on_failed",
        "handler path",
        "the same for `mq gc --errors --notify` and the failed messages",
        _handler,
    ),
)

QUEUE_KEYS: dict[str, Any] = {key.name: key.parse for key in QUEUE_KEY_TABLE}

#: the file's top level; config.py parses them
TOP_KEY_TABLE: tuple[Key, ...] = (
    Key(
        "database",
        "URL or mapping",
        "a URL (`mysql://user:password@host:3306/db`, `mariadb://…`, `…?unix_socket=/path`, "
        "`postgresql://user:password@host:5432/db`, `postgres://…`, `…?host=/var/run/postgresql` "
        "(socket directory), `…?sslmode=require`, `sqlite:////abs/path.db`, "
        "`sqlite:///relative.db`) or a mapping of the keys below. A PostgreSQL URL may list "
        "several hosts, `postgresql://u@db1:5432,db2:5432/app?target_session_attrs=read-write` "
        "(see [Failover](../databases/postgresql.md#failover)). `--database URL` / "
        "`$MQ_DATABASE_URL` override it",
        default="SQLite at `$XDG_DATA_HOME/mq/mq.db`",
    ),
    Key(
        "table",
        "SQL identifier",
        "the table holding every queue (a letter or `_`, then up to 56 of letters, digits, "
        "`_`); `<table>_meta` records the schema version",
        default="`mq_messages`",
    ),
    Key(
        "lock_dir",
        "directory",
        "per-host slot lock files and wake-up FIFOs, in a directory per database and table, "
        "`db-<id>/` (12 hex characters from the database's kind, host(s) and port or socket, "
        "name, and the table; a SQLite database's resolved path and the table; never the user "
        "or password). `db-<id>/database` names the database; `db-<id>/mail.0.lock` holds the "
        "pid of the drain in slot 0 of queue `mail`. So two configs of one user on one host "
        "(staging and production, two applications) never share a slot, even with a queue of "
        "the same name. Created 0700, refused if owned by another user or writable by others. "
        "Never in shared `/tmp`, where another user could create the directory first and make "
        "every drain exit 2",
        default="`$XDG_RUNTIME_DIR/mq`, else `$XDG_STATE_HOME/mq/locks` "
        "(`~/.local/state/mq/locks`; cron sets no `XDG_RUNTIME_DIR`)",
    ),
    Key(
        "run_log_retention",
        "duration",
        "how long the run log keeps drain runs and their per-minute results for `mq status` "
        "(see [The run log](../operating/status.md#the-run-log)); older rows are deleted by "
        "drains, at most 1000 a run; `0` = drains record nothing",
        default="`7d`",
    ),
    Key("defaults", "mapping", "settings every queue inherits (the queue keys below)", default=""),
    Key(
        "queues",
        "mapping",
        "queue name (1–64 of `A-Z a-z 0-9 _ . -`) → its settings (the queue keys below)",
        default="",
    ),
    Key(
        "web",
        "mapping",
        "the console's (`mq web`) `users` (name → `password_hash`, `role`: `viewer` or "
        "`operator`), `secret_key` or `secret_key_file`, and `audit_log`; read and checked "
        "by `mq web` (see [Console](../console.md))",
        default="none: `mq web` serves loopback only",
    ),
)

_POSTGRES = "../databases/postgresql.md"

#: the keys of a `database:` mapping (config.py parses them, core/dburl.py builds the URL)
DATABASE_KEY_TABLE: tuple[Key, ...] = (
    Key("url", "URL", "a database URL as above; the keys below add to it or override its parts"),
    Key(
        "kind",
        "`mysql`, `mariadb`, `postgresql` or `postgres`",
        "the database when there is no `url` (a `url`'s scheme says it)",
        default="`mysql`",
    ),
    Key("host", "host name", "the server (PostgreSQL: also a socket directory)"),
    Key("port", "whole number", "the server's port (3306, 5432 by default)"),
    Key("user", "name", "the database user"),
    Key("database", "name", "the database (schema) holding mq's tables"),
    Key("unix_socket", "path", "MariaDB/MySQL: connect through this socket instead of TCP"),
    Key(
        "password",
        "text",
        "the password in the file itself; mq warns (and `mq check` fails) when such a file is "
        "readable by other users. Use one of `password`, `password_file`, `password_env`",
    ),
    Key("password_file", "path", "a file holding the password (its first line)"),
    Key(
        "password_env",
        "variable name",
        "an environment variable holding the password; handlers never see it",
    ),
    Key(
        "ssl",
        "`true` or `{ca, verify}`",
        "TLS: `true` encrypts and verifies the server against the system CAs; `{ca: FILE}` "
        "against your CA; `verify: false` encrypts without checking (not recommended). "
        "Without it mq connects in plain text",
    ),
    Key("sslmode", "libpq `sslmode`", "PostgreSQL: `require`, `verify-full`, ..."),
    Key("connect_timeout", "duration", "how long a connection attempt may take", default="`10s`"),
    Key(
        "pooler",
        "`auto`, `none`, `transaction` or `session`",
        f"PostgreSQL: what sits between mq and the server (see [Poolers]({_POSTGRES}#poolers)); "
        "also `?pooler=` in a URL",
        default="`auto`",
    ),
)
