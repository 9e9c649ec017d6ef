"""Small gaps between the documentation and the code, found by the fault suite."""

from __future__ import annotations

import pytest

import mq_cli
from mq_cli.core.durations import parse_duration

pytestmark = pytest.mark.slow


def test_current_message_is_exported_as_documented():
    assert callable(mq_cli.current_message)


@pytest.mark.parametrize("text", ["٣s", "３0s", "1\u00a0h", "\u20035m"])
def test_durations_are_ascii(text):
    with pytest.raises(ValueError):
        parse_duration(text)
