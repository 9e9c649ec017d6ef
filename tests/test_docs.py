"""Every command documents itself: a one-line summary, an example, help for each option."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mq_cli.cli.main import cli


def walk(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))


COMMANDS = list(walk(cli))
IDS = [" ".join(path) for path, _ in COMMANDS]


def test_the_foundation_commands_exist():
    names = {path[0] for path, _ in COMMANDS}
    assert {"init", "enqueue", "stats"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_command_has_summary_and_example(path: tuple[str, ...], command: click.Command):
    text = command.help or ""
    lines = text.strip().splitlines()
    assert lines, f"mq {' '.join(path)} has no help text"
    summary = lines[0].strip()
    assert summary, "the first line is a summary"
    assert len(lines) == 1 or not lines[1].strip(), "the summary is one line, then a blank line"
    assert len(summary) <= 100, "the summary fits on one line"
    assert "Example" in text, f"mq {' '.join(path)} --help shows no example"


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_command_help_runs_and_every_option_is_explained(
    path: tuple[str, ...], command: click.Command
):
    result = CliRunner().invoke(cli, [*path, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"mq {' '.join(path)} {param.opts[0]} has no help text"


def test_mq_help_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0
    listed = result.stdout.split("Commands:", 1)[1]
    for name in cli.commands:
        assert f"  {name} " in listed or f"  {name}\n" in listed, f"{name} missing from mq --help"
    for option in ("--config", "--database", "--verbose", "--version"):
        assert option in result.stdout
