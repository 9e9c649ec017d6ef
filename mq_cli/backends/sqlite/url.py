"""SQLite's database URL: sqlite:////abs/path.db or sqlite:///relative.db, and the
file mq uses with no configuration at all ($XDG_DATA_HOME/mq/mq.db)."""

from __future__ import annotations

import os
from typing import Any

from mq_cli.core.dburl import DatabaseSettings, UrlForm, redact_url
from mq_cli.core.errors import ConfigError


def parse_url(url: str, parts: Any, query: dict[str, str]) -> DatabaseSettings:
    """sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db" (SQLAlchemy's rule)."""
    from urllib.parse import unquote

    path = url.split(":///", 1)[1] if ":///" in url else ""
    path = path.split("?", 1)[0]
    if not path:
        raise ConfigError(
            f"bad database URL {redact_url(url)!r}: give a file, e.g. sqlite:////var/lib/mq/mq.db "
            "(absolute) or sqlite:///mq.db (relative)"
        )
    return DatabaseSettings(kind="sqlite", path=unquote(path))


def default_path() -> str:
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data_home, "mq", "mq.db")


FORM = UrlForm(
    kind="sqlite",
    schemes=("sqlite",),
    shown=("sqlite://",),
    parse=parse_url,
    describe=lambda settings: f"sqlite:{settings.path}",
    file=True,
    zero_config=lambda: DatabaseSettings(kind="sqlite", path=default_path()),
)
