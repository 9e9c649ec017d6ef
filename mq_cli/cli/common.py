"""What every `mq` command shares: the group and its global options, the
state a command gets, shared options, progress on a terminal, and how errors
become exit codes.

Only the cli package imports click. Each command is a short call into ``api``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from mq_cli.core.durations import parse_duration
from mq_cli.core.errors import MqError
from mq_cli.core.states import BY_ID, Action
from mq_cli.core.version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:
    pass


class _Log:
    """The "mq" logger, set up on first use: `mq enqueue` and the like start
    faster without importing logging (a cold start is what cron pays)."""

    verbose = 0
    _logger: Any = None

    def get(self) -> Any:
        if self._logger is None:
            import logging

            level = (
                logging.DEBUG
                if self.verbose > 1
                else logging.INFO
                if self.verbose
                else logging.WARNING
            )
            from mq_cli.core import terminal

            class Handler(logging.StreamHandler):  # type: ignore[type-arg]
                def emit(self, record: logging.LogRecord) -> None:
                    terminal.clear()  # a drain's status line: the log line starts on its own
                    super().emit(record)

            handler = Handler(sys.stderr)
            handler.setFormatter(logging.Formatter("mq: %(message)s"))
            logging.basicConfig(level=level, handlers=[handler], force=True)
            self._logger = logging.getLogger("mq")
        return self._logger

    def info(self, *args: Any) -> None:
        self.get().info(*args)

    def warning(self, *args: Any) -> None:
        self.get().warning(*args)


log = _Log()


class State:
    """What the global options say; the config and connection are made on first use."""

    def __init__(self, config: str | None, database: str | None, verbose: int):
        self.config_path = config
        self.database_url = database
        self.verbose = verbose
        self._mq: Any = None

    @property
    def mq(self) -> Any:
        if self._mq is None:
            from mq_cli.api import MQ  # imports the backends: their dialects' URLs parse
            from mq_cli.core.config import load_config

            config = load_config(self.config_path, self.database_url)
            for warning in config.warnings:
                log.warning(warning)
            self._mq = MQ(config)
        return self._mq

    def close(self) -> None:
        if self._mq is not None:
            self._mq.close()


#: `mq --help`'s sections, as the docs group the commands; every command is in
#: exactly one (tests/test_docs.py), a name not registered (yet) is skipped
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Produce", ("enqueue",)),
    ("Drain", ("drain",)),
    ("Observe", ("stats", "status", "list", "show", "web")),
    ("Repair", ("gc", *BY_ID, Action.PURGE, Action.PAUSE, Action.RESUME, Action.STOP)),
    ("Set up", ("init", "check")),
)


class MqGroup(click.Group):
    """Turns every error into one or two `mq:` lines on stderr and the documented exit code,
    and lists the commands in `COMMAND_GROUPS`' sections."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = {name: self.commands[name] for name in self.list_commands(ctx)}
        shown = {name for name, command in commands.items() if not command.hidden}
        width = max(map(len, shown), default=0)  # one column for every section
        limit = formatter.width - 6 - width
        sections = [(title, [n for n in names if n in shown]) for title, names in COMMAND_GROUPS]
        placed = {name for _, names in sections for name in names}
        sections.append(("Other", sorted(shown - placed)))  # a command no section names yet
        for title, names in sections:
            if names:
                with formatter.section(title):
                    formatter.write_dl(
                        [
                            (n.ljust(width), commands[n].get_short_help_str(limit=limit))
                            for n in names
                        ]
                    )

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # click's standalone mode would print its own "Usage: ... Error: ..." block.
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("mq: aborted: nothing was changed", err=True)
            sys.exit(1)
        except click.UsageError as exc:
            click.echo(f"mq: {exc.format_message()}", err=True)
            where = exc.ctx.command_path if exc.ctx is not None else "mq"
            click.echo(f"mq: see `{where} --help`", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"mq: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except MqError as exc:
            self._report(ctx, exc, str(exc))
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # Output piped into `head` and friends: stop quietly.
            sys.stderr.close()
            ctx.exit(0)
        except Exception as exc:  # a bug in mq: say so, without a traceback unless -v
            self._report(
                ctx, exc, f"internal error: {type(exc).__name__}: {exc} (run with -v for details)"
            )
            ctx.exit(1)
        finally:
            state = ctx.find_object(State)
            if state is not None:
                state.close()

    @staticmethod
    def _report(ctx: click.Context, exc: BaseException, text: str) -> None:
        state = ctx.find_object(State)
        if state is not None and state.verbose:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        for line in text.splitlines() or [""]:
            click.echo(f"mq: {line}", err=True)


class Progress:
    """A running count on stderr while a long operation works; only on a terminal
    (cron and pipes get nothing)."""

    def __init__(self, label: str):
        self.label = label
        self.count = 0
        self.live = sys.stderr.isatty()

    def add(self, count: int) -> None:
        self.count += count
        if self.live:
            sys.stderr.write(f"\r{self.label}: {self.count}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.live and self.count:
            sys.stderr.write("\n")


def _duration(ctx: click.Context, param: click.Parameter, value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def queue_option(required: bool = False, multiple: bool = False) -> Callable[[Any], Any]:
    return click.option(
        "-q",
        "--queue",
        "queues" if multiple else "queue",
        required=required,
        multiple=multiple,
        metavar="QUEUE",
        help="The queue" + (" (repeat for several)." if multiple else "."),
    )


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(cls=MqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c", "--config", envvar="MQ_CONFIG", metavar="PATH",
    help="Config file (env MQ_CONFIG). Default: ./mq.yaml, $XDG_CONFIG_HOME/mq/config.yaml, "
    "/etc/mq/config.yaml, else built-in defaults.",
)  # fmt: skip
@click.option(
    "-d", "--database", envvar="MQ_DATABASE_URL", metavar="URL",
    help="Database URL (env MQ_DATABASE_URL), overriding the config's: "
    "sqlite:////abs/path.db, mysql://user@host/db or postgresql://user@host/db "
    "(a password in the URL shows in `ps`: prefer the config's password_env)",
)  # fmt: skip
@click.option(
    "-v", "--verbose", count=True, help="Log more (repeat for debug); tracebacks on errors."
)
@click.version_option(
    __version__,
    "--version",
    prog_name="mq",
    message=f"%(prog)s %(version)s (schema {SCHEMA_VERSION})",
)
@click.pass_context
def cli(ctx: click.Context, config: str | None, database: str | None, verbose: int) -> None:
    """mq: a message queue in your database, drained by cron. No daemon.

    \b
    Producers:  echo '{"id": 1}' | mq enqueue -q thumbnails
    Cron:       * * * * *  /opt/mq/bin/mq drain -q thumbnails --max-seconds 60
    Operators:  mq stats; mq gc --stalled; mq gc --errors

    Exit codes: 0 done; 1 a check found something or input was rejected;
    2 usage or configuration error; 3 the database could not be reached.
    """
    log.verbose = verbose
    log._logger = None  # a new invocation (tests run many in one process)
    ctx.obj = State(config, database, verbose)


pass_state = click.make_pass_decorator(State)


class MessageId(click.ParamType):
    """A message id: a whole number from 1, as `mq list` and `mq enqueue` print them."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and value >= 1:
            return value
        text = str(value).strip()
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r} is not a message id: ids are whole numbers from 1 (see `mq list`)")


# -- init -------------------------------------------------------------------
