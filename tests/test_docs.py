"""Every command documents itself: a one-line summary, an example, help for each option;
`mq --help` groups the commands as the docs do, and shell completion works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from mq_cli.cli.common import COMMAND_GROUPS
from mq_cli.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent


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
    listed = result.stdout.split(f"\n{COMMAND_GROUPS[0][0]}:", 1)[1]  # the sections follow Options
    for name in cli.commands:
        assert f"  {name} " in listed or f"  {name}\n" in listed, f"{name} missing from mq --help"
    for option in ("--config", "--database", "--verbose", "--version"):
        assert option in result.stdout


def test_mq_help_groups_every_command_once_as_the_docs_do():
    """Each command in exactly one of `mq --help`'s sections (Produce, Drain, Observe,
    Repair, Set up), none left to "Other", and the CLI reference in the same groups."""
    grouped = [name for _, names in COMMAND_GROUPS for name in names]
    assert len(grouped) == len(set(grouped)), "a command in two groups"
    assert set(cli.commands) <= set(grouped), set(cli.commands) - set(grouped)
    text = CliRunner().invoke(cli, ["--help"], catch_exceptions=False).stdout
    assert "\nOther:" not in text
    sections = re.findall(r"^(\w[\w ]*):\n((?:  .*\n?)+)", text, re.M)
    shown = {title: re.findall(r"^  (\S+)  ", body, re.M) for title, body in sections}
    for title, names in COMMAND_GROUPS:
        assert shown.get(title, []) == [n for n in names if n in cli.commands], title
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    order = [m.group(1) for m in re.finditer(r"^### mq (\S+)", reference, re.M)]
    assert order == [n for n in grouped if n in cli.commands]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_prints_a_script(shell, tmp_path):
    """The docs' completion lines (docs/commands.md): click's own, through the installed mq."""
    mq = Path(sys.executable).with_name("mq")
    env = {**os.environ, "_MQ_COMPLETE": f"{shell}_source", "HOME": str(tmp_path)}
    result = subprocess.run([str(mq)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "_MQ_COMPLETE" in result.stdout and "mq" in result.stdout
    assert f"{shell}_source" in (ROOT / "docs" / "commands.md").read_text()


def test_completion_completes_commands_and_options(tmp_path):
    mq = Path(sys.executable).with_name("mq")
    env = {**os.environ, "_MQ_COMPLETE": "bash_complete", "COMP_WORDS": "mq dr",
           "COMP_CWORD": "1", "HOME": str(tmp_path)}  # fmt: skip
    result = subprocess.run([str(mq)], env=env, capture_output=True, text=True, timeout=60)
    assert "plain,drain" in result.stdout.splitlines(), result.stdout
    env["COMP_WORDS"], env["COMP_CWORD"] = "mq drain --max-s", "2"
    result = subprocess.run([str(mq)], env=env, capture_output=True, text=True, timeout=60)
    assert "plain,--max-seconds" in result.stdout.splitlines(), result.stdout
