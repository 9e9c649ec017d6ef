"""`mq check`: everything a deploy can get wrong, one line per check."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass

from .errors import MqError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False  # ok, but worth a look: shown as "warn", does not fail the check


def run_checks(config_path: str | None, database_url: str | None) -> list[Check]:
    """Run every check that can run; a failed config stops the ones that need it."""
    from . import handlers, slots
    from .backends import open_backend
    from .backends.base import SCHEMA_VERSION
    from .config import load_config

    results: list[Check] = []
    try:
        config = load_config(config_path, database_url)
    except MqError as exc:
        return [Check("config", False, str(exc))]
    where = config.source or "no file found, built-in defaults"
    results.append(Check("config", True, f"{where} ({len(config.queues)} queue(s))"))
    if config.source:
        results.append(_permissions(config.source, bool(config.warnings)))

    try:
        backend = open_backend(config.database, config.table, create=False)
    except MqError as exc:
        results.append(Check("database", False, str(exc)))
    else:
        with backend:
            results.append(Check("database", True, f"reachable: {config.database.describe()}"))
            try:
                version = backend.schema_version()
            except MqError as exc:
                results.append(Check("schema", False, str(exc)))
            else:
                if version is None:
                    results.append(
                        Check("schema", False, f"table {config.table} missing: run `mq init`")
                    )
                elif version != SCHEMA_VERSION:
                    results.append(
                        Check(
                            "schema",
                            False,
                            f"version {version}, this mq expects {SCHEMA_VERSION}: "
                            "upgrade mq or run `mq init` with the newer release",
                        )
                    )
                else:
                    results.append(
                        Check("schema", True, f"table {config.table}, version {version}")
                    )

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
                handlers.resolve(path)
            except MqError as exc:
                results.append(Check(f"queue {name}", False, f"{label}: {exc}"))
            else:
                results.append(_importable(f"queue {name}", label, path))

    results.append(_lock_dir(config.lock_dir, slots.ensure_lock_dir))
    return results


def _importable(name: str, label: str, path: str) -> Check:
    from . import handlers

    origin = handlers.standard_origin(path)
    if origin is None:
        return Check(name, True, f"{label} {path} importable")
    return Check(
        name,
        True,
        f"{label} {path} is from Python's standard library ({origin}), not your code: "
        "a typo? (os:system would run every payload as a command)",
        warn=True,
    )


def _permissions(path: str, holds_readable_password: bool) -> Check:
    if holds_readable_password:
        return Check(
            "config file",
            False,
            f"{path} holds a database password and is readable by other users: chmod 600 {path}",
        )
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return Check("config file", True, f"permissions {mode:o}")


def _lock_dir(path: str, ensure: object) -> Check:
    try:
        ensure(path)  # type: ignore[operator]
        with tempfile.NamedTemporaryFile(dir=path, prefix=".mq-check-"):
            pass
    except MqError as exc:
        return Check("lock_dir", False, str(exc))
    except OSError as exc:
        return Check("lock_dir", False, f"{path} is not writable: {exc.strerror}")
    return Check("lock_dir", True, f"{path} usable")
