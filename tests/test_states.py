"""States and verbs as types (issue 51, item 3): core/states.py's members print as the
strings they replaced, every view keeps those strings byte for byte, and no state or
action is written as a bare string literal outside core/states.py and the SQL."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from mq_cli.core import models
from mq_cli.core.errors import ConfigError
from mq_cli.core.states import Action, Outcome, State, Stored
from tests.test_gc import make_stalled
from tests.webconsole import Server, confirmation, write_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mq_cli"
WORDS = {member.value for kind in (State, Stored, Action, Outcome) for member in kind}
#: to do, a later step of issue 51: other helpers change these folders now
NOT_YET = ("drain/", "runners/")
#: literals that are a word but not a state or an action: JSON keys of other meanings
NOT_A_STATE = {
    ("web/bulk.py", "refused"): 2,  # an outcome's count of refused ids, not Action.REFUSED
    ("web/drains.py", "quiet"): 2,  # the key of the stop API's body, {"quiet": true}
}


def test_members_print_write_and_bind_as_their_values():
    """A member is its string wherever it goes: str(), f-strings (3.11's Enum would give
    "State.READY"), %, JSON keys and values, equality, hashing."""
    ready = State.READY
    shown = (str(ready), f"{ready}", f"{ready:>7}", "%s" % ready)  # noqa: UP031  # as logging
    assert shown == ("ready", "ready", "  ready", "ready")
    assert f"{Action.REQUEUE}d" == "requeued" and f"on_{State.STALLED}" == "on_stalled"
    assert json.dumps({ready: [Action.REQUEUE_STALLED]}) == '{"ready": ["requeue-stalled"]}'
    assert ready == "ready" and {"ready": 1}[ready] == 1 and ready in ("ready",)
    assert ", ".join((Action.RETRY, Action.DELETE)) == "retry, delete"


def test_the_tuples_keep_their_strings_and_order():
    assert models.STATES == ("ready", "delayed", "processing", "stalled", "failed")
    assert models.STATUSES == ("ready", "processing", "failed")
    assert models.STATE_STATUS == {"delayed": "ready", "stalled": "processing"}
    from mq_cli.cli.operate import STATES as CHOICES

    # click shows an Enum member by its name: the CLI's choices are the plain strings
    assert CHOICES == models.STATES and all(type(choice) is str for choice in CHOICES)


def test_a_string_from_outside_is_parsed_once_with_a_clear_error():
    assert State.parse("stalled", "state") is State.STALLED
    with pytest.raises(ConfigError, match="state must be one of ready, delayed, processing, "
                       "stalled, failed, not 'stalld'"):  # fmt: skip
        State.parse("stalld", "state")
    with pytest.raises(ConfigError, match=r"not \['ready'\]"):
        State.parse(["ready"], "state")  # type: ignore[arg-type]  # a JSON body's list


def _literals() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "core/states.py" or name.startswith(NOT_YET):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in WORDS:
                key = (name, node.value)
                found[key] = found.get(key, 0) + 1
    return found


def test_no_state_or_action_is_a_bare_string_outside_the_enum_module():
    """mypy flags a misspelt member; a bare "procesing" it cannot see. The SQL files
    are not Python and keep their words; drain/ and runners/ are to do (NOT_YET)."""
    found = _literals()
    assert found == NOT_A_STATE, (
        "use the members of mq_cli/core/states.py (State, Stored, Action, Outcome) instead "
        f"of these literals: { {k: n for k, n in found.items() if NOT_A_STATE.get(k) != n} }"
    )


def test_the_to_do_folders_are_named_so_they_are_not_forgotten():
    """Remove a folder from NOT_YET once its literals are gone; this says when."""
    left = {}
    for folder in NOT_YET:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            count = sum(isinstance(n, ast.Constant) and n.value in WORDS for n in ast.walk(tree))
            left[folder] = left.get(folder, 0) + count
    assert all(left.values()), f"a folder without literals left: drop it from NOT_YET {left}"


def test_the_json_of_stats_list_and_gc_keeps_its_strings(db):
    assert db.run("enqueue", "-q", "mail", "--silent", "1").exit_code == 0
    assert db.run("enqueue", "-q", "mail", "--silent", "--delay", "1h", "2").exit_code == 0
    make_stalled(db, "mail", 1)
    stats = db.run("stats", "--json").output
    assert "State." not in stats and "Stored." not in stats
    row = json.loads(stats)["mail"]
    assert list(row)[:5] == ["ready", "delayed", "processing", "stalled", "failed"]
    assert [row[k] for k in ("ready", "delayed", "processing", "stalled", "failed")] == [
        1,
        1,
        0,
        1,
        0,
    ]
    listed = db.run("list", "-q", "mail", "--json").output
    assert "State." not in listed and "Stored." not in listed
    shown = [(m["status"], m["state"]) for m in json.loads(listed)]
    assert shown == [("ready", "ready"), ("ready", "delayed"), ("processing", "stalled")]
    found = db.run("list", "-q", "mail", "--status", "stalled", "--json")
    assert [m["state"] for m in json.loads(found.output)] == ["stalled"]
    table = db.run("list", "-q", "mail").output
    assert "State." not in table and "stalled" in table and "delayed" in table
    gc = db.run("gc", "--stalled", "--requeue", "-q", "mail")
    assert "requeued 1 stalled message(s)" in gc.output and "State." not in gc.output


def test_the_audit_line_and_the_console_api_keep_their_strings(db, tmp_path):
    write_config(tmp_path)
    make_stalled(db, "mail", 1)
    assert db.run("enqueue", "-q", "thumbs", "--silent", "1").exit_code == 0
    server = Server(db)
    try:
        operator = server.client()
        fields, action, _ = confirmation(operator, "/queues/mail/confirm?action=requeue-stalled")
        assert operator.post(action, {**fields, "csrf_token": operator.token()}).status == 200
        token = operator.token()
        paused = operator.request("POST", "/api/queues/thumbs/pause", {}, X_CSRFToken=token)
        assert json.loads(paused.body) == {"queue": "thumbs", "paused": True, "changed": True}
        for path in ("/api/stats", "/api/messages?queue=mail", "/api/actions", "/api/status"):
            body = operator.get(path).body
            assert "State." not in body and "Action." not in body and "Outcome." not in body
        listed = operator.get("/api/messages?queue=mail&state=failed").json()
        assert [m["state"] for m in listed] == ["failed"]  # max_errors 1: requeued to failed
        bad = operator.get("/api/messages?queue=mail&state=stalld&error=x")
        assert bad.status == 400 and "state must be one of" in bad.body
    finally:
        server.stop()
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert '"action": "requeue-stalled"' in lines[0] or '"action":"requeue-stalled"' in lines[0]
    first, second = (json.loads(line) for line in lines)
    assert (first["action"], first["filter"], first["outcome"]) == (
        "requeue-stalled", {"state": "stalled"}, {"ready": 0, "failed": 1},
    )  # fmt: skip
    assert (second["action"], second["queue"], second["detail"]) == ("pause", "thumbs", "api")
