"""`mq web`: the operator console, served until stopped (waitress), or a password's hash.

Flask and waitress are imported only here and only when the command runs, so
`mq enqueue` never pays for them; without the `web` extra the command says how
to install it (exit 2).
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

from mq_cli.cli.common import State, cli, log, pass_state
from mq_cli.core.errors import ConfigError

DEFAULT_BIND = "127.0.0.1:8765"
THREADS = 8


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (e.g. {DEFAULT_BIND})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _bind(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    return parse_bind(value)


def _needs_extra() -> None:
    try:
        import flask  # noqa: F401
        import flask_wtf  # noqa: F401
        import waitress  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"the console needs the web extra ({exc.name} is missing): pip install 'mq-cli[web]'"
        ) from None


@cli.command()
@click.option(
    "--bind", default=DEFAULT_BIND, show_default=True, metavar="HOST:PORT", callback=_bind,
    help="Where to listen. An address other than loopback needs web.users in the config.",
)  # fmt: skip
@click.option(
    "--read-only", is_flag=True, help="Show everything, change nothing (every action is 403)."
)
@click.option(
    "--hash-password", is_flag=True,
    help="Print a hash of a password read from stdin (for web.users.NAME.password_hash) and exit.",
)  # fmt: skip
@pass_state
def web(state: State, bind: tuple[str, int], read_only: bool, hash_password: bool) -> None:
    """Serve the operator console until stopped (Ctrl-C or SIGTERM).

    Pages: the overview (every queue's counts and health, live drains,
    throughput plots), a queue (its messages by state, error text and unique
    key, with a payload preview, "next retry at" and "failed at"; retry,
    delete, requeue, pause, resume, purge), a queue's failures grouped by
    error (retry or delete a group), a search across queues by id, unique key
    or error text, a message (payload, last error, runs), the run log, and the
    actions operators took. Counts above 10,000 are estimates, shown as ~N.

    Every action that changes messages first shows a confirmation page: what
    it does, to how many messages, with which filter or ids; a purge, or an
    empty filter over a whole queue, needs the queue's name typed. Each live
    drain has Quiet (finish the current message, then exit) and Stop (as
    SIGTERM) buttons, as `mq stop --quiet` and `mq stop` (through the
    database: the drain may run on any host). A JSON API under /api/ answers
    as the CLI's --json does (GET /api/stats is `mq stats --json`).

    Users come from the config, each a viewer (reads) or an operator (also
    acts), with a hash from `mq web --hash-password`:

    \b
      web:
        users:
          alice: {password_hash: "scrypt:...", role: operator}
          bob:   {password_hash: "scrypt:...", role: viewer}
        secret_key_file: /etc/mq/web-secret   # else sessions end with the process

    With no user configured the console serves loopback only, to anyone on
    this host, as an operator (a viewer with --read-only), says so on stderr,
    and answers only the Host names 127.0.0.1, localhost, [::1] and the bind
    address (any other Host is 400: no DNS rebinding). A viewer reads every
    payload. Every POST needs the CSRF token of the person's own session and
    a same-origin request. Every action, and every refused attempt (403, CSRF,
    a failed login), is one line of web.audit_log, shown on the Actions page.
    See docs/console.md (its security model), also for mounting it in a
    Flask, Django or FastAPI app.

    \b
    Example:  mq web
              mq web --bind 0.0.0.0:8765 --read-only
              printf '%s' "$PASSWORD" | mq web --hash-password
    """
    _needs_extra()
    if hash_password:
        click.echo(_hash(_read_password()))
        return
    host, port = bind
    config = state.mq.config
    from mq_cli.web.app import create_app
    from mq_cli.web.settings import parse

    users = parse(config).users
    if not users and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve {host}:{port} with no user configured: anyone who reaches it "
            "could act on the queues; add web.users (see `mq web --help`) or bind 127.0.0.1"
        )
    anonymous = None if users else ("viewer" if read_only else "operator")
    from mq_cli.web.guard import allowed_hosts

    app = create_app(
        config, read_only=read_only, anonymous=anonymous,
        allowed_hosts=None if users else allowed_hosts(host),
    )  # fmt: skip
    log.get()  # the console's log lines (a database's error, a refused login) on stderr
    _serve(app, host, port, anonymous)


def _read_password() -> str:
    if sys.stdin.isatty():
        password: str = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise click.UsageError("the password is empty: give it on stdin")
    return password


def _hash(password: str) -> str:
    from mq_cli.web.auth import hash_password

    return hash_password(password)


def _serve(app: Any, host: str, port: int, anonymous: str | None) -> None:
    from waitress import create_server

    from mq_cli.web.guard import cookie_name

    try:
        server: Any = create_server(app, host=host, port=port, threads=THREADS, ident="mq")
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    port = getattr(server, "effective_port", port)
    # this console's own cookie: another console on this host (another port) keeps its own
    app.config["SESSION_COOKIE_NAME"] = cookie_name(app.extensions["mq"].config, port)
    shown = f"[{host}]" if ":" in host else host
    text = f"mq: console on http://{shown}:{port}/ (Ctrl-C stops it)"
    if anonymous is not None:  # in the same write, after the address a script reads first
        what = "reads every payload" if anonymous == "viewer" else "may retry, delete and purge"
        text += (
            f"\nmq: WARNING: no web.users in the config: every local user of this host acts "
            f"as an {anonymous} without a password ({what}); add web.users "
            "(mq web --hash-password) to require a login"
        )
    click.echo(text, err=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
