"""`mq check`: everything a deploy can get wrong, one line per check."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq_cli.core.errors import EngineRefused, MqError

if TYPE_CHECKING:
    from mq_cli.backends.base import Backend
    from mq_cli.core.config import Config


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False  # ok, but worth a look: shown as "warn", does not fail the check


def run_checks(config_path: str | None, database_url: str | None) -> list[Check]:
    """Run every check that can run; a failed config stops the ones that need it."""
    from mq_cli.backends import open_backend
    from mq_cli.core.config import load_config
    from mq_cli.runners import paths

    results: list[Check] = []
    try:
        config = load_config(config_path, database_url)
    except MqError as exc:
        return [Check("config", False, str(exc))]
    where = config.source or "no file found, built-in defaults"
    results.append(Check("config", True, f"{where} ({len(config.queues)} queue(s))"))
    if config.source:
        results.append(_permissions(config.source, bool(config.warnings)))
        secrets = _web_secrets(config.source, config.web)
        if secrets is not None:
            results.append(secrets)

    try:
        backend = open_backend(
            config.database, config.table, create=False, lock_dir=config.lock_dir, standby_ok=True
        )
    except EngineRefused as exc:
        results.append(Check("engine", False, str(exc)))
    except MqError as exc:
        results.append(Check("database", False, str(exc)))
    else:
        with backend:
            results.append(Check("database", True, f"reachable: {config.database.describe()}"))
            try:
                results.append(Check("database mode", *backend.server_mode()))
            except MqError as exc:
                results.append(Check("database mode", False, str(exc)))
            results += [Check(*line) for line in backend.route_checks()]
            live = _liveness(backend)
            results.append(live)
            schema = _schema(backend, config.table)
            results.append(schema)
            if schema.ok:
                results.append(_run_log(backend, config.run_log_retention))
                results += _limits(backend, config, session=not live.warn)
                results += _writable(backend)
                try:
                    results += [Check(*found) for found in backend.health()]
                except MqError as exc:
                    results.append(Check("database health", False, str(exc)))

    for name, queue in config.queues.items():
        for label, path in (
            ("handler", queue.handler),
            ("on_stalled", getattr(queue, "on_stalled", None)),
            ("on_failed", getattr(queue, "on_failed", None)),
        ):
            if not path:
                if label == "handler":
                    results.append(Check(f"queue {name}", True, "no handler (enqueue only)"))
                continue
            try:
                paths.resolve(path)
            except MqError as exc:
                results.append(Check(f"queue {name}", False, f"{label}: {exc}"))
            else:
                results.append(_importable(f"queue {name}", label, path))

    results.append(_lock_dir(config))
    return results


def _liveness(backend: Backend) -> Check:
    """How a killed drain is told from a live one (mq_cli/backends/liveness.py)."""
    from mq_cli.backends.liveness import LIVE_MARK
    from mq_cli.drain.session import owner_token

    if backend.caps.file_locks:
        return Check(
            "dead drains", True, f"seen at once: each drain holds a lock file in {backend.lock_dir}"
        )
    token = owner_token() + LIVE_MARK
    try:
        taken = backend.live_lock_take(token)
        if taken:
            backend.live_lock_release(token)
    except MqError as exc:
        taken = None
        why = str(exc)
    else:
        if getattr(getattr(backend, "server", None), "galera", False):
            why = "Galera: a lock is local to one node"
        elif getattr(backend, "pool_mode", None) == "transaction":
            why = "a pooler in transaction mode keeps no session between transactions"
        else:
            why = (
                "the server gave no lock that dies with the session (a pooler in transaction mode?)"
            )
    if taken:
        return Check("dead drains", True, "seen at once: each drain holds a session lock")
    return Check(
        "dead drains",
        True,
        f"seen only after stalled_after without a heartbeat ({why})",
        warn=True,
    )


def _importable(name: str, label: str, path: str) -> Check:
    from mq_cli.runners import paths

    notes = []
    origin = paths.standard_origin(path)
    if origin is not None:
        notes.append(
            f"is from Python's standard library ({origin}), not your code: a typo? "
            "(os:system would run every payload as a command)"
        )
    here = paths.only_from_cwd(path)
    if here is not None:
        notes.append(
            f"imports only from the current directory ({here}); cron starts in your home "
            f"directory: set PYTHONPATH={here} in the crontab (crontab.example)"
        )
    if not notes:
        return Check(name, True, f"{label} {path} importable")
    return Check(name, True, f"{label} {path} " + "; it also ".join(notes), warn=True)


def _permissions(path: str, holds_readable_password: bool) -> Check:
    if holds_readable_password:
        return Check(
            "config file",
            False,
            f"{path} holds a database password and is readable by other users: chmod 600 {path}",
        )
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return Check("config file", True, f"permissions {mode:o}")


def _web_secrets(path: str, web: object) -> Check | None:
    """The console's inline secret_key or password hashes, in a file others can read."""
    if not isinstance(web, dict):
        return None
    held = []
    if web.get("secret_key") is not None:
        held.append("an inline web.secret_key")
    if isinstance(web.get("users"), dict) and web["users"]:
        held.append("web.users password hashes")
    if not held:
        return None
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & 0o077:
        return Check("web secrets", True, f"{' and '.join(held)}, readable by its owner only")
    return Check(
        "web secrets",
        True,
        f"{path} holds {' and '.join(held)} and is readable by other users (mode {mode:o}): "
        f"chmod 600 {path}, or keep the key in web.secret_key_file",
        warn=True,
    )


def _lock_dir(config: Config) -> Check:
    """The lock_dir and this database's directory in it (host/slots.py): usable, or
    creatable by the first drain; looked at, never created (`mq check` changes
    nothing: run as root or another user, it would make a directory that the
    drains' user then cannot use)."""
    from mq_cli.host.slots import database_dir, inspect_lock_dir

    path = config.lock_dir
    mine = database_dir(config)
    try:
        exists = inspect_lock_dir(path)
        if exists:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".mq-check-"):
                pass
            if inspect_lock_dir(mine):
                with tempfile.NamedTemporaryFile(dir=mine, prefix=".mq-check-"):
                    pass
    except MqError as exc:
        return Check("lock_dir", False, str(exc))
    except OSError as exc:
        return Check("lock_dir", False, f"{path} is not writable: {exc.strerror}")
    if not exists:
        return Check(
            "lock_dir",
            True,
            f"{path} will be created (mode 700) by the first drain (this database's slots: {mine})",
        )
    # The directory is named: an operator looking for this database's slot files finds it.
    return Check("lock_dir", True, f"{path} usable (this database's slots: {mine})")


def _schema(backend: Backend, table: str) -> Check:
    """The version and the shape every command relies on (`mq init` repairs both)."""
    from mq_cli.backends.schema import problems

    try:
        found = problems(backend)
        version = backend.schema_version()
    except MqError as exc:
        return Check("schema", False, str(exc))
    if found:
        return Check("schema", False, "; ".join(found))
    return Check("schema", True, f"table {table}, version {version}")


def _run_log(backend: Backend, retention: float) -> Check:
    """The run log's tables (`mq status`): without them drains work but record nothing."""
    from mq_cli.core.durations import format_duration
    from mq_cli.host.runlog import denied_text

    try:
        access = backend.runlog_access()
    except MqError as exc:
        return Check("run log", False, str(exc))
    denied = [name for name, why in access.items() if why == "denied"]
    if denied:  # every drain warns and `mq status` fails, in these words
        return Check("run log", False, denied_text("SELECT", denied).removeprefix("run log: "))
    missing = [name for name, why in access.items() if why == "missing"]
    if missing:
        return Check(
            "run log", True,
            f"table(s) {', '.join(missing)} missing: drains record nothing and `mq status` "
            "fails; run `mq init`",
            warn=True,
        )  # fmt: skip
    if retention <= 0:
        return Check("run log", True, "off (run_log_retention: 0)", warn=True)
    return Check("run log", True, f"kept for {format_duration(retention)}")


def _writable(backend: Backend) -> list[Check]:
    """Reachable and readable is not enough: a read-only file, a read-only server or
    a user without INSERT fails every enqueue and every drain's acknowledgement."""
    results = []
    try:
        backend.probe_write()
    except MqError as exc:
        results.append(Check("writable", False, f"a write was refused: {exc}"))
    else:
        results.append(Check("writable", True, "a test insert succeeded (rolled back)"))
    if backend.caps.integrity_check:
        try:
            found = backend.integrity()
        except MqError as exc:
            found = [str(exc)]
        if found:
            results.append(
                Check(
                    "integrity",
                    False,
                    f"PRAGMA quick_check: {'; '.join(found)} (restore the file from a backup)",
                )
            )
        else:
            results.append(Check("integrity", True, "PRAGMA quick_check ok"))
    return results


def _limits(backend: Backend, config: Config, session: bool) -> list[Check]:
    """max_drains and rate_limit: how each is held here (``session``: the server gives
    session locks, as for dead drains), and the tables they need."""
    from mq_cli.core.keys import format_rate

    limited = [q for q in config.queues.values() if q.max_drains or q.rate_limit]
    try:
        missing = backend.limits_missing()
    except MqError as exc:
        return [Check("fleet limits", False, str(exc))]
    if not limited:
        if missing:
            return [
                Check(
                    "fleet limits",
                    True,
                    f"table(s) {', '.join(missing)} missing "
                    "(no queue sets max_drains or rate_limit); run `mq init`",
                    warn=True,
                )
            ]
        return []
    results = []
    if backend.caps.file_locks:
        how = "lock files beside the database: a killed drain's slot is free at once"
    elif not session:
        how = "heartbeat rows: a killed drain's slot is free after the queue's stalled_after"
    else:
        how = "session locks: a killed drain's slot is free at once"
    for queue in limited:
        parts, ok = [], True
        if queue.max_drains:
            parts.append(f"max_drains {queue.max_drains} ({how})")
        if queue.rate_limit:
            rates = f"{backend.table}_rates"
            if rates in missing:
                ok = False
                parts.append(
                    f"rate_limit {format_rate(queue.rate_limit)}: table {rates} "
                    "missing, drains of the queue exit 3: run `mq init`"
                )
            else:
                parts.append(
                    f"rate_limit {format_rate(queue.rate_limit)} (a token bucket in "
                    f"table {rates}, for every host)"
                )
        if queue.max_drains and f"{backend.table}_slots" in missing and how.startswith("heart"):
            ok = False
            parts.append(f"table {backend.table}_slots missing: run `mq init`")
        results.append(Check(f"queue {queue.name} limits", ok, "; ".join(parts)))
    return results
