"""The config reference in README.md and config.example.yaml cannot drift from the schema."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from click.testing import CliRunner

from mq_cli.cli.main import cli
from mq_cli.core.config import TOP_KEYS, QueueConfig
from mq_cli.core.keys import QUEUE_KEYS

ROOT = Path(__file__).resolve().parent.parent


def _readme_table_keys(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split(heading, 1)[1]
    table = section.split("\n\n", 2)[1] if section.startswith(":") else section
    keys = []
    for line in section.splitlines():
        match = re.match(r"\| `([a-z_]+)` \|", line)
        if match:
            keys.append(match.group(1))
        elif keys and not line.startswith("|"):
            break
    assert table
    return keys


def test_readme_lists_every_queue_setting_with_its_default():
    keys = _readme_table_keys("Queue settings (under `defaults:` or a queue)")
    assert sorted(keys) == sorted(QUEUE_KEYS) and len(keys) == len(set(keys))
    assert set(keys) == {f.name for f in fields(QueueConfig)} - {"name"}


def test_readme_lists_every_top_level_key():
    keys = _readme_table_keys("## Configuration reference")
    assert keys == list(TOP_KEYS)


def test_config_example_shows_every_option_and_is_valid(tmp_path, monkeypatch):
    text = (ROOT / "config.example.yaml").read_text()
    for key in [*TOP_KEYS, *QUEUE_KEYS]:
        assert re.search(rf"^\s*#?\s*{key}:", text, re.MULTILINE), key
    # the example loads (its password_file must exist for that: point it somewhere real)
    secret = tmp_path / "pw"
    secret.write_text("x\n")
    (tmp_path / "mq.yaml").write_text(
        text.replace("/etc/mq/db-password", str(secret)).replace("/var/lock/mq", str(tmp_path))
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["init", "--print-sql"])
    assert result.exit_code == 0, result.output


def test_readme_opens_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", setup, re.DOTALL)
    assert len(commands) == 2
    assert "mq enqueue" in commands[0] and "mq drain" in commands[0]
    assert commands[1] == "tests/run.sh"
    assert "tests/run.sh" in (ROOT / ".ci" / "run").read_text()
