"""The console's small parts without a server: the decoy hash per scheme (issue 49 F10),
the text made visible (F14), the whole-number parser (F9)."""

from __future__ import annotations

import pytest


def test_the_decoy_hash_has_each_configured_scheme():
    from werkzeug.security import generate_password_hash

    from mq_cli.web.auth import BasicAuth, method_of
    from mq_cli.web.settings import User

    users = {
        "a": User("a", generate_password_hash("x"), "operator"),
        "b": User("b", generate_password_hash("y", method="pbkdf2:sha256:1000"), "viewer"),
    }
    auth = BasicAuth(users)
    assert {method_of(h) for h in auth.decoys} == {"scrypt:32768:8:1", "pbkdf2:sha256:1000"}
    chosen = {method_of(auth.decoy_for(f"user{i}")) for i in range(64)}
    assert chosen == {"scrypt:32768:8:1", "pbkdf2:sha256:1000"}  # both in use
    assert auth.decoy_for("mallory") == auth.decoy_for("mallory")  # a name keeps its decoy
    only = BasicAuth({"b": users["b"]})
    assert [method_of(h) for h in only.decoys] == ["pbkdf2:sha256:1000"]


def test_visible_escapes_controls_but_keeps_newlines_and_tabs():
    from markupsafe import Markup

    from mq_cli.web.inputs import visible

    assert visible("a\r\nb\tc") == "a\r\nb\tc"
    assert visible("\x00\x1b\x7f\x85\u061c\u200b\u200f\u202a\u202e\u2066\u2069\ufeff") == (
        "\\u0000\\u001b\\u007f\\u0085\\u061c\\u200b\\u200f\\u202a\\u202e\\u2066\\u2069\\ufeff"
    )
    assert visible("plain é ✓") == "plain é ✓"
    assert visible(5) == 5
    marked = visible(Markup("<b>\u202e</b>"))
    assert isinstance(marked, Markup) and marked == Markup("<b>\\u202e</b>")


def test_whole_number_parser():
    from mq_cli.core.errors import ConfigError
    from mq_cli.web.inputs import whole

    assert whole("after", "9223372036854775807") == 2**63 - 1
    assert whole("after", "0", low=0) == 0
    for bad in ("²", "٣", "-1", "1e3", " 1", "", "9223372036854775808", "0"):
        with pytest.raises(ConfigError):
            whole("after", bad)
