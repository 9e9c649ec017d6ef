"""The operator console: `mq web`, or a WSGI application to mount in a web app.

::

    from mq_cli.web import create_app
    console = create_app("/etc/mq/config.yaml")     # a Flask app (WSGI)

Needs the `web` extra (``pip install 'mq-cli[web]'``: Flask, Flask-WTF, waitress).
See docs/console.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mq_cli.web.auth import Principal as Principal

__all__ = ["Principal", "create_app"]


def create_app(config: Any = None, **options: Any) -> Any:
    """The console as a WSGI application; see :func:`mq_cli.web.app.create_app`."""
    from mq_cli.web.app import create_app as make

    return make(config, **options)


def __getattr__(name: str) -> Any:
    if name == "Principal":
        from mq_cli.web.auth import Principal

        return Principal
    raise AttributeError(name)
