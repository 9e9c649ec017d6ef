"""The registry of SQL dialects.

A dialect is one package here, ``mq_cli/backends/<name>/``, holding its
statements in ``<name>.sql``. Importing ``mq_cli.backends`` imports every
package that has such a file (:func:`discover`); each registers itself by
calling :func:`register` with its :class:`Dialect`: its URL form (schemes, parse,
describe: ``core.dburl.UrlForm``), how to open it, its DDL, its insert inside an
application's transaction, and the DB-API modules whose connections that
insert takes. What differs in behaviour is a capability of its Backend class
(``base.Caps``), never a test of its name elsewhere.

A dialect package may instead :func:`declare` its URL form and the module that
registers the rest, imported at the first :func:`get` of that dialect: a command
on SQLite loads nothing of MariaDB's or PostgreSQL's (~5 % of its start). A
dialect module imports its driver at first use (:class:`LazyDriver`), so
finding every dialect costs no driver's import.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mq_cli.backends import sqlfiles
from mq_cli.backends.base import Backend, Caps
from mq_cli.core import dburl
from mq_cli.core.dburl import DatabaseSettings, UrlForm
from mq_cli.core.errors import ConfigError


@dataclass(frozen=True)
class OpenOptions:
    """How open_backend was asked to open (see its docstring)."""

    create: bool | None
    auto_init: bool
    reading: bool
    standby_ok: bool


@dataclass(frozen=True)
class Dialect:
    url: UrlForm
    backend: type[Backend]
    open: Callable[[DatabaseSettings, str, OpenOptions], Backend]
    #: table -> the statements `mq init` runs
    ddl: Callable[[str], list[str]]
    #: (connection, table, queue, payload, delay, priority, unique_key, notify) -> id or None
    insert_in_transaction: Callable[..., int | None]
    #: enqueue(connection=...): the modules whose connections it takes (by prefix)
    connection_modules: tuple[str, ...]
    #: how enqueue(connection=...)'s error names that driver
    driver: str

    @property
    def name(self) -> str:
        return self.url.kind

    @property
    def caps(self) -> Caps:
        return self.backend.caps


_DIALECTS: dict[str, Dialect] = {}
#: kind -> the module whose import registers that dialect (declared, not loaded yet)
_DECLARED: dict[str, str] = {}


def register(dialect: Dialect) -> None:
    """Make ``dialect`` known (its module calls this when imported)."""
    _DIALECTS[dialect.name] = dialect
    dburl.register(dialect.url)


def declare(url: UrlForm, module: str) -> None:
    """Make a dialect's URLs known now and the dialect itself at its first use: the
    import of ``module`` registers it (a package's ``__init__`` calls this)."""
    _DECLARED[url.kind] = module
    dburl.register(url)


def discover() -> None:
    """Import every dialect package: each ``<name>/`` with an ``__init__.py`` and a
    ``<name>.sql`` in a folder of ``sqlfiles.FOLDERS`` (this package's own, unless a
    test adds one)."""
    package = sys.modules[__package__ or ""]  # mq_cli.backends, being imported
    for folder in sqlfiles.FOLDERS:
        if folder not in package.__path__:
            package.__path__.append(folder)
        for name in sorted(os.listdir(folder)):
            init = os.path.join(folder, name, "__init__.py")
            if os.path.exists(sqlfiles.sql_file(folder, name)) and os.path.exists(init):
                importlib.import_module(f"mq_cli.backends.{name}")


def get(kind: str) -> Dialect:
    """The dialect named ``kind`` (a DatabaseSettings.kind), loaded if it was declared."""
    dialect = _DIALECTS.get(kind)
    if dialect is None and kind in _DECLARED:
        importlib.import_module(_DECLARED[kind])
        dialect = _DIALECTS.get(kind)
    if dialect is None:
        raise ConfigError(f"unknown database kind {kind!r}")
    return dialect


def all_dialects() -> list[Dialect]:
    """Every dialect, declared ones loaded, by name."""
    return [get(name) for name in sorted({*_DIALECTS, *_DECLARED})]


def for_connection(connection: Any) -> Dialect:
    """The dialect whose driver made ``connection`` (enqueue(connection=...))."""
    module = type(connection).__module__
    for dialect in all_dialects():
        if module.startswith(dialect.connection_modules):
            return dialect
    drivers = [d.driver for d in all_dialects()]
    raise ConfigError(
        f"enqueue(connection=...) takes a {', '.join(drivers[:-1])} or {drivers[-1]} "
        f"connection, not {type(connection).__name__}"
    )


class LazyDriver:
    """A driver module imported at its first attribute: ``psycopg = LazyDriver("psycopg",
    "psycopg.rows")`` reads as the module wherever it is used."""

    def __init__(self, name: str, *submodules: str):
        self._names = (name, *submodules)
        self._module: ModuleType | None = None

    def load(self) -> ModuleType:
        if self._module is None:
            modules = [importlib.import_module(name) for name in self._names]
            self._module = modules[0]
        return self._module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.load(), attr)


def driver_installed(driver: Any) -> bool:
    """Whether a driver (a module or a LazyDriver) can be imported."""
    if isinstance(driver, LazyDriver):
        try:
            driver.load()
        except ImportError:
            return False
    return driver is not None
